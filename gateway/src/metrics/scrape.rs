//! [`Scrape`]: writes gauges and counters through `prometheus-client`'s encoder, from
//! values read at scrape time (the library does the exposition format and the escaping).

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use std::fmt;

/// A series' labels, in order.
pub(crate) type Labels = Vec<(&'static str, String)>;

pub(crate) struct Scrape<'a> {
    encoder: DescriptorEncoder<'a>,
}

/// The library appends `_total` to a counter's name; the names here are written whole.
fn counter_base(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

impl<'a> Scrape<'a> {
    pub(crate) fn new(encoder: DescriptorEncoder<'a>) -> Self {
        Scrape { encoder }
    }

    pub(crate) fn gauge<V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        value: V,
    ) -> fmt::Result {
        self.encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&value)
    }

    pub(crate) fn counter<V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        value: V,
    ) -> fmt::Result {
        self.encoder
            .encode_descriptor(counter_base(name), help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    pub(crate) fn gauges<V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        samples: &[(Labels, V)],
    ) -> fmt::Result {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in samples {
            family.encode_family(labels)?.encode_gauge(value)?;
        }
        Ok(())
    }

    pub(crate) fn counters<V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        samples: &[(Labels, V)],
    ) -> fmt::Result {
        let mut family =
            self.encoder
                .encode_descriptor(counter_base(name), help, None, MetricType::Counter)?;
        for (labels, value) in samples {
            family
                .encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(value, None)?;
        }
        Ok(())
    }
}
