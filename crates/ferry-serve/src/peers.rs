//! Connections per client address. Before a token is checked, a connection costs the client
//! nothing but a TCP handshake: one address opening idle connections could hold every one the
//! server allows. Each address may hold a share of them; the rest stay for the others.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The open connections of each client address.
#[derive(Debug)]
pub struct Peers {
    per_address: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection of one address, counted until dropped.
#[derive(Debug)]
pub struct Slot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    /// At most `per_address` connections from each address.
    pub fn new(per_address: usize) -> Arc<Peers> {
        Arc::new(Peers {
            per_address: per_address.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a new connection from `ip`, or `None` when it holds its share already.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut open = self.open.lock().expect("peers lock");
        let n = open.entry(ip).or_insert(0);
        if *n >= self.per_address {
            return None;
        }
        *n += 1;
        Some(Slot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().expect("peers lock");
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                // Addresses gone leave nothing behind: the map holds only those connected.
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_holds_its_share_and_gets_it_back() {
        let peers = Peers::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = peers.enter(a).unwrap();
        let _second = peers.enter(a).unwrap();
        assert!(peers.enter(a).is_none(), "a third from one address");
        let _other = peers.enter(b).expect("another address has its own share");
        drop(first);
        let _again = peers
            .enter(a)
            .expect("a closed connection's slot comes back");
        drop((_again, _second, _other));
        assert!(peers.open.lock().unwrap().is_empty());
    }
}
