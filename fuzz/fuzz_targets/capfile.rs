//! The capture-file reader and the whole analysis pipeline on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    latscope_wire::fuzzing::capfile(data);
});
