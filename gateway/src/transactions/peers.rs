//! Connections from this broker to other brokers' Kafka ports for the transaction
//! machinery (markers to partition leaders, verifications to coordinators): one per broker,
//! opened on first use, reused while it works, replaced once broken or when the broker's
//! address changes. Requests to one broker go one at a time over its connection.

use crate::client::connection::Connection;
use kafka_protocol::protocol::Request;
use oxbow_metadata::BrokerId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

type Slot = Arc<tokio::sync::Mutex<Option<Connection>>>;

pub struct PeerPool {
    /// The client id the other broker sees (its logs name the purpose).
    client_id: &'static str,
    /// Bound on connecting and on each exchange.
    timeout: Duration,
    slots: tokio::sync::Mutex<HashMap<BrokerId, Slot>>,
}

impl PeerPool {
    pub fn new(client_id: &'static str, timeout: Duration) -> Self {
        PeerPool {
            client_id,
            timeout,
            slots: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Sends `request` to `broker` at `addr`, at the highest version both sides speak
    /// within `versions`, and returns that version with the response; `Ok(None)` if the
    /// other broker speaks none of them (an older one, mid-upgrade).
    pub async fn call<R: Request>(
        &self,
        broker: BrokerId,
        addr: &str,
        request: &R,
        versions: std::ops::RangeInclusive<i16>,
    ) -> Result<Option<(i16, R::Response)>, String> {
        let slot = {
            let mut slots = self.slots.lock().await;
            slots.entry(broker).or_default().clone()
        };
        let mut held = slot.lock().await;
        let reusable = held
            .as_ref()
            .is_some_and(|c| c.addr() == addr && !c.is_broken());
        if !reusable {
            *held = Some(
                Connection::open(addr, self.timeout, self.client_id)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let conn = held.as_mut().ok_or_else(|| "no connection".to_string())?;
        let Ok(version) = conn.pick_version::<R>(Some(*versions.end())) else {
            return Ok(None);
        };
        if version < *versions.start() {
            return Ok(None);
        }
        let response = conn
            .send(version, request, self.timeout)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Some((version, response)))
    }
}
