//! The packet decoder (every link type) and TCP analysis on an arbitrary frame.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_wire::fuzzing::packet(data);
});
