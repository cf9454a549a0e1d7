//! The evidence exchange of `diagnose --server-agent`: the agent's request parser (framed and
//! bare) and the client's reading of an agent's answer.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_net::serve::fuzzing::evidence(data);
});
