//! The HTTP/1.1 response parser of `latscope http`, fed the way the load engine feeds it: the
//! first byte picks HEAD or not, the next four the sizes of the pieces the input arrives in.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let (ctl, body) = data.split_at(5);
    let whole = latscope_http::parse::drive(body, &[], ctl[0] & 1 == 1);
    let split = latscope_http::parse::drive(body, &ctl[1..5], ctl[0] & 1 == 1);
    assert_eq!(whole, split, "the result depends on how the input is split");
});
