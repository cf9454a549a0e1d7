//! `latscope serve`'s control connection: greeting and frames as they come off the socket, or
//! a test request's JSON, through the server's checks (`validate`, `memory_needed`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_net::serve::fuzzing::control(data);
});
