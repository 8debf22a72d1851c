//! Azure settings: connection strings, keys, SAS tokens, and object_store's chain for the rest.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::azure::{AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};

use super::{client_options, connector, env, hidden, no_retries, pick_class};
use crate::cloud::azure::AzureWriter;
use crate::cloud::explained::Explained;
use crate::error::one_line;
use crate::{Error, Result};

/// Azurite's well-known development account.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Azure settings; [`AzureConfig::from_env`] reads `AZURE_STORAGE_CONNECTION_STRING`, or
/// `AZURE_STORAGE_ACCOUNT` with `AZURE_STORAGE_KEY` or `AZURE_STORAGE_SAS_TOKEN` (and
/// `AZURE_STORAGE_ENDPOINT`). Without a key or SAS token, `object_store` finds the
/// credentials: an Azure AD client secret (`AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`,
/// `AZURE_TENANT_ID`), workload identity (`AZURE_FEDERATED_TOKEN_FILE`), then the managed
/// identity of the VM (IMDS).
#[derive(Clone, Default)]
pub struct AzureConfig {
    /// Storage account name.
    pub account: Option<String>,
    /// Account key (base64).
    pub key: Option<String>,
    /// Access tier of every blob written: `Hot`, `Cool`, `Cold` or `Archive`.
    pub access_tier: Option<String>,
    /// A SAS token (`sv=...&sig=...`), from `AZURE_STORAGE_SAS_TOKEN`, a connection string's
    /// `SharedAccessSignature` or the query of an `https://` URL.
    pub sas_token: Option<String>,
    /// Blob service endpoint, including the account for path-style endpoints such as
    /// Azurite's `http://127.0.0.1:10000/devstoreaccount1`.
    pub endpoint: Option<String>,
    /// PEM file of extra trusted CAs.
    pub ca_cert: Option<PathBuf>,
}

impl AzureConfig {
    /// Settings from the standard Azure environment variables.
    pub fn from_env() -> Self {
        let mut c = match env(&["AZURE_STORAGE_CONNECTION_STRING"]) {
            Some(cs) => Self::from_connection_string(&cs),
            None => Self::default(),
        };
        c.account = c
            .account
            .or_else(|| env(&["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_ACCOUNT_NAME"]));
        c.key = c
            .key
            .or_else(|| env(&["AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY"]));
        c.endpoint = c.endpoint.or_else(|| env(&["AZURE_STORAGE_ENDPOINT"]));
        c.sas_token = c
            .sas_token
            .or_else(|| env(&["AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_KEY"]));
        c.ca_cert = env(&["SSL_CERT_FILE"]).map(PathBuf::from);
        c
    }

    /// Parses `AccountName=..;AccountKey=..;BlobEndpoint=..` or `UseDevelopmentStorage=true`.
    pub fn from_connection_string(cs: &str) -> Self {
        let mut c = Self::default();
        let mut protocol = "https".to_string();
        let mut suffix = None;
        for part in cs.split(';').filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            match k.trim() {
                "AccountName" => c.account = Some(v.into()),
                "AccountKey" => c.key = Some(v.into()),
                // The token itself holds '=': everything after the first one.
                "SharedAccessSignature" => {
                    c.sas_token = part.split_once('=').map(|(_, t)| t.to_string())
                }
                "BlobEndpoint" => c.endpoint = Some(v.trim_end_matches('/').into()),
                "DefaultEndpointsProtocol" => protocol = v.into(),
                "EndpointSuffix" => suffix = Some(v.to_string()),
                "UseDevelopmentStorage" if v.eq_ignore_ascii_case("true") => {
                    c.account = Some(DEV_ACCOUNT.into());
                    c.key = Some(DEV_KEY.into());
                    c.endpoint = Some(format!("http://127.0.0.1:10000/{DEV_ACCOUNT}"));
                }
                _ => {}
            }
        }
        if c.endpoint.is_none() {
            if let (Some(a), Some(s)) = (&c.account, suffix) {
                c.endpoint = Some(format!("{protocol}://{a}.blob.{s}"));
            }
        }
        // A SAS connection string names no account: the endpoint does, in its host
        // (ACCOUNT.blob.core.windows.net) or, for emulators, its path (HOST:PORT/ACCOUNT).
        if c.account.is_none() {
            c.account = c.endpoint.as_deref().and_then(account_of_endpoint);
        }
        c
    }

    pub(in crate::cloud) fn build(&self, container: &str) -> Result<(MicrosoftAzure, AzureWriter)> {
        let Some(account) = &self.account else {
            return Err(Error::Invalid(
                "no Azure account: set AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT, \
                 or give https://ACCOUNT.blob.core.windows.net/CONTAINER/..."
                    .into(),
            ));
        };
        let endpoint = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
        let http = connector(self.ca_cert.as_ref())?;
        let mut b = MicrosoftAzureBuilder::new()
            .with_account(account)
            .with_container_name(container)
            .with_endpoint(endpoint.clone())
            .with_allow_http(endpoint.starts_with("http://"))
            .with_retry(no_retries())
            .with_client_options(client_options(Some(&endpoint)))
            .with_http_connector(http.clone());
        // What object_store's chain reads, set ones only (its from_env takes an empty
        // variable for a value).
        for (key, vars) in [
            (
                AzureConfigKey::ClientId,
                &["AZURE_CLIENT_ID", "AZURE_STORAGE_CLIENT_ID"][..],
            ),
            (
                AzureConfigKey::ClientSecret,
                &["AZURE_CLIENT_SECRET", "AZURE_STORAGE_CLIENT_SECRET"],
            ),
            (
                AzureConfigKey::AuthorityId,
                &["AZURE_TENANT_ID", "AZURE_STORAGE_TENANT_ID"],
            ),
            (AzureConfigKey::AuthorityHost, &["AZURE_AUTHORITY_HOST"]),
            (
                AzureConfigKey::FederatedTokenFile,
                &["AZURE_FEDERATED_TOKEN_FILE"],
            ),
            (
                AzureConfigKey::MsiEndpoint,
                &["AZURE_MSI_ENDPOINT", "IDENTITY_ENDPOINT", "MSI_ENDPOINT"],
            ),
            (AzureConfigKey::ObjectId, &["AZURE_OBJECT_ID"]),
            (AzureConfigKey::MsiResourceId, &["AZURE_MSI_RESOURCE_ID"]),
            (AzureConfigKey::UseAzureCli, &["AZURE_USE_AZURE_CLI"]),
        ] {
            if let Some(v) = env(vars) {
                b = b.with_config(key, v);
            }
        }
        let given = match (&self.key, &self.sas_token) {
            (Some(key), _) => {
                b = b.with_access_key(key);
                true
            }
            (None, Some(sas)) => {
                b = b.with_config(AzureConfigKey::SasKey, sas.trim_start_matches('?'));
                true
            }
            (None, None) => false,
        };
        let build = |b: MicrosoftAzureBuilder| b.build().map_err(|e| Error::Invalid(one_line(&e)));
        let az = match given {
            true => build(b)?,
            // The chain object_store assembles, its failure explained, for both clients.
            false => {
                let chain = build(b.clone())?.credentials().clone();
                let explained = Explained::new(
                    chain,
                    "no Azure credentials: none given (AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN, \
                     a connection string, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, \
                     AZURE_FEDERATED_TOKEN_FILE), and managed identity failed"
                        .into(),
                );
                build(b.with_credentials(Arc::new(explained)))?
            }
        };
        let credentials = az.credentials().clone();
        let tier = self
            .access_tier
            .as_deref()
            .map(|t| pick_class(t, &["Hot", "Cool", "Cold", "Archive"], "Azure"))
            .transpose()?;
        let writer = AzureWriter::new(
            http.http(),
            &endpoint,
            account,
            container,
            credentials,
            tier,
        )?;
        Ok((az, writer))
    }
}

fn account_of_endpoint(endpoint: &str) -> Option<String> {
    let u = url::Url::parse(endpoint).ok()?;
    let host = u.host_str()?;
    let name = match host.split_once(".blob.") {
        Some((account, _)) => account,
        None => u.path_segments()?.find(|s| !s.is_empty())?,
    };
    Some(name.to_string())
}

impl std::fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureConfig")
            .field("account", &self.account)
            .field("key", &hidden(&self.key))
            .field("sas_token", &hidden(&self.sas_token))
            .field("endpoint", &self.endpoint)
            .field("access_tier", &self.access_tier)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}
