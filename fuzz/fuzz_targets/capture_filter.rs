//! A tcpdump filter as typed, through libpcap's compiler and latscope's wrapper, then run on a
//! packet (see `latscope_capture::fuzzing::filter` for the input layout).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_capture::fuzzing::filter(data);
});
