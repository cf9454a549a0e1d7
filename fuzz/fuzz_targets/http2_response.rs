//! The HTTP/2 engine's client side (h2's framing and HPACK, then the engine's reading of the
//! response and its retry-or-error decision) against a server sending arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = latscope_http::fuzzing::h2_response(data);
});
