//! Datagrams on `latscope serve`'s UDP socket: both header parsers and a stream flow's receive
//! accounting (sequence window, duplicates, reordering, jitter) on hostile sequence numbers.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_net::serve::fuzzing::datagrams(data);
});
