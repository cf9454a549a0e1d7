//! Arbitrary bytes from a client through the Prometheus exporter's HTTP/1.1 server (hyper with
//! latscope's limits), with the agent's `/probe` query parser behind it (without probing).
#![no_main]

use std::sync::Arc;

use latscope_exporter::{Reply, ReplyFuture, Routes};

struct Agent;

impl Routes for Agent {
    fn metrics(&self) -> String {
        "# TYPE latscope_up gauge\nlatscope_up 1\n# EOF\n".into()
    }

    fn route(&self, path: &str, query: &str) -> Option<ReplyFuture> {
        if path != "/probe" {
            return None;
        }
        let (status, body) = latscope_probe::spec::probe_query_answer(query);
        Some(Box::pin(async move { Reply::text(status, body) }))
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_exporter::fuzzing::request(data, Arc::new(Agent));
});
