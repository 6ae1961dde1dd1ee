#![no_main]

use std::sync::{Arc, OnceLock};

use hwdb::access::Caller;
use hwdb::db::Db;
use hwdb::exec::Limits;
use hwdb::table::Ring;
use libfuzzer_sys::fuzz_target;

fn db() -> &'static Db {
    static DB: OnceLock<Db> = OnceLock::new();
    DB.get_or_init(|| {
        let db = Db::open(":memory:", Ring::rows(1000), Arc::new(|| 1_700_000_000_000_000_000), Limits::default())
            .expect("in-memory db");
        let _ = db.execute("insert into Flows values (6,'10.2.0.10',5000,'1.1.1.1',443,10,1000)", &Caller::Local);
        db
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = hwdb::parse::parse(text) {
            let _ = e.render(text);
        }
        let _ = db().execute(text, &Caller::Local);
        let _ = db().execute(text, &Caller::Lan("10.2.0.10".parse().expect("literal")));
    }
});
