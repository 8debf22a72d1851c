//! The last link of a credential chain, whose failure says what was looked for: without it, a
//! laptop with no keys set reads only "connection refused" from 169.254.169.254.

use std::sync::Arc;

use async_trait::async_trait;
use object_store::CredentialProvider;

use crate::error::{concise, one_line};

/// Words the error mapping knows as "credentials missing": not retried, said as they are.
pub(crate) const MISSING: &str = "credentials: none given";

/// A provider whose errors begin with what was looked for. Its `Debug` shows only that:
/// the provider inside may hold a key, and print it.
pub(super) struct Explained<T> {
    inner: Arc<dyn CredentialProvider<Credential = T>>,
    /// `no CLOUD credentials: none given (...), and SOURCE failed`.
    said: String,
}

impl<T> std::fmt::Debug for Explained<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explained")
            .field("said", &self.said)
            .finish_non_exhaustive()
    }
}

impl<T> Explained<T> {
    pub(super) fn new(inner: Arc<dyn CredentialProvider<Credential = T>>, said: String) -> Self {
        debug_assert!(said.contains(MISSING));
        Self { inner, said }
    }
}

#[async_trait]
impl<T: std::fmt::Debug + Send + Sync> CredentialProvider for Explained<T> {
    type Credential = T;

    async fn get_credential(&self) -> object_store::Result<Arc<T>> {
        self.inner
            .get_credential()
            .await
            .map_err(|e| object_store::Error::Generic {
                store: "credentials",
                source: format!("{}: {}", self.said, concise(&one_line(&e))).into(),
            })
    }
}
