#![no_main]

//! The RPC framing: any datagram either fails to decode or decodes to exactly what encoding
//! its header and payload gives back; and screening a decoded request's first fragment, as
//! the server does before taking it on, never panics whatever the caller.

use hwdb::access::{screen, Caller};
use hwdb::exec::Limits;
use hwdb::proto;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((h, payload)) = proto::decode(data) {
        assert_eq!(proto::encode(&h, payload), data);
        let head = match std::str::from_utf8(payload) {
            Ok(text) => text,
            Err(e) => std::str::from_utf8(&payload[..e.valid_up_to()]).unwrap_or_default(),
        };
        let limits = Limits::default();
        for caller in [Caller::Local, Caller::Lan("10.2.0.10".parse().expect("literal"))] {
            let _ = screen(&caller, &limits, h.count as usize * proto::MAX_PAYLOAD, head, h.count == 1);
        }
    }
});
