//! The byte test vectors in testvectors/ (shared with the Python and Go clients) are exactly
//! what this implementation encodes. `HWDB_REGEN_VECTORS=1 cargo test --test vectors`
//! rewrites them after a deliberate protocol change.

use std::path::PathBuf;

use hwdb::db::{encode_notification, encode_reply};
use hwdb::exec::QueryResult;
use hwdb::proto::{self, Header, Kind};
use hwdb::value::{ColType, Value};
use serde_json::json;

struct Vector {
    file: String,
    description: String,
    header: Header,
    payload: Vec<u8>,
}

#[allow(clippy::too_many_arguments)]
fn vec_of(
    file: &str,
    description: &str,
    kind: Kind,
    conn: u32,
    seq: u32,
    frag: u16,
    count: u16,
    flags: u16,
    payload: &[u8],
) -> Vector {
    Vector {
        file: file.into(),
        description: description.into(),
        header: Header { kind, conn, seq, frag, count, flags },
        payload: payload.to_vec(),
    }
}

fn fragmented(prefix: &str, description: &str, kind: Kind, conn: u32, seq: u32, msg: &[u8]) -> Vec<Vector> {
    let n = proto::frag_count(msg.len()).unwrap();
    (0..n)
        .map(|i| {
            vec_of(
                &format!("{prefix}_frag{i}.bin"),
                &format!("{description} (fragment {} of {n})", i + 1),
                kind,
                conn,
                seq,
                i,
                n,
                0,
                proto::fragment(msg, i),
            )
        })
        .collect()
}

fn build() -> (Vec<Vector>, serde_json::Value) {
    const CONN: u32 = 0x1234abcd;
    let select = b"select * from AppPriority [last]";
    let long_insert = {
        let rows: Vec<String> = (0..30)
            .map(|i| format!("('admit','aa:bb:cc:dd:ee:{i:02x}','device {i} admitted by the household owner')"))
            .collect();
        format!("insert into Events values {}", rows.join(","))
    };
    let ok = encode_reply(&Ok(QueryResult {
        columns: vec![
            ("tstamp".into(), ColType::Timestamp),
            ("app".into(), ColType::Varchar),
            ("priority".into(), ColType::Varchar),
        ],
        rows: vec![vec![Value::Ts(1_700_000_000_123_456_789), Value::Str("zoom".into()), Value::Str("high".into())]],
        message: None,
    }));
    let err = encode_reply(&Err("1:10: expected 'from', found 'form'".into()));
    let big = encode_reply(&Ok(QueryResult {
        columns: vec![
            ("sport".into(), ColType::Integer),
            ("saddr".into(), ColType::Varchar),
            ("ok".into(), ColType::Boolean),
            ("load".into(), ColType::Real),
        ],
        rows: (0..60)
            .map(|i| {
                vec![
                    Value::Int(50000 + i),
                    Value::Str(format!("10.2.0.{}", 10 + i * 4).into()),
                    Value::Bool(i % 2 == 0),
                    Value::Real(i as f64 / 4.0),
                ]
            })
            .collect(),
        message: None,
    }));
    let note = encode_notification(
        7,
        &[("saddr".into(), ColType::Varchar), ("bytes".into(), ColType::Integer)],
        &[vec![Value::Str("10.2.0.10".into()), Value::Int(1500)]],
    );

    let mut v = vec![
        vec_of("request_select.bin", "single-fragment request", Kind::Request, CONN, 1, 0, 1, 0, select),
        vec_of(
            "request_select_retransmit.bin",
            "the same request retransmitted (RETRANSMIT flag)",
            Kind::Request,
            CONN,
            1,
            0,
            1,
            proto::FLAG_RETRANSMIT,
            select,
        ),
        vec_of("response_ok.bin", "successful reply to request_select.bin", Kind::Response, CONN, 1, 0, 1, 0, &ok),
        vec_of(
            "response_ack.bin",
            "client acknowledges response fragment 0 of 1",
            Kind::ResponseAck,
            CONN,
            1,
            0,
            1,
            0,
            b"",
        ),
    ];
    v.extend(fragmented(
        "request_insert",
        "two-fragment insert request",
        Kind::Request,
        CONN,
        2,
        long_insert.as_bytes(),
    ));
    let n = proto::frag_count(long_insert.len()).unwrap();
    assert_eq!(n, 2);
    v.push(vec_of(
        "request_ack.bin",
        "server acknowledges request fragment 0 of 2",
        Kind::RequestAck,
        CONN,
        2,
        0,
        n,
        0,
        b"",
    ));
    v.push(vec_of("response_error.bin", "error reply", Kind::Response, CONN, 3, 0, 1, 0, &err));
    v.extend(fragmented("response_big", "multi-fragment reply", Kind::Response, CONN, 4, &big));
    v.push(vec_of("ping.bin", "keep-alive ping for request 5", Kind::Ping, CONN, 5, 0, 1, 0, b""));
    v.push(vec_of("pong.bin", "server still working on request 5", Kind::Pong, CONN, 5, 0, 1, 0, b""));
    v.push(vec_of(
        "pong_unknown.bin",
        "server has no state for request 6 (UNKNOWN flag)",
        Kind::Pong,
        CONN,
        6,
        0,
        1,
        proto::FLAG_UNKNOWN,
        b"",
    ));
    v.push(vec_of(
        "notify.bin",
        "subscription 7 delivers one row (conn = subscription id)",
        Kind::Notify,
        7,
        1,
        0,
        1,
        0,
        &note,
    ));
    v.push(vec_of("notify_ack.bin", "subscriber acknowledges notify fragment", Kind::NotifyAck, 7, 1, 0, 1, 0, b""));

    let files =
        |p: &str| -> Vec<String> { v.iter().filter(|x| x.file.starts_with(p)).map(|x| x.file.clone()).collect() };
    let reply = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
    let messages = json!([
        {"name": "request_insert", "files": files("request_insert_"), "text": long_insert},
        {"name": "response_big", "files": files("response_big_"), "reply": reply(&big)},
        {"name": "response_ok", "files": ["response_ok.bin"], "reply": reply(&ok)},
        {"name": "response_error", "files": ["response_error.bin"], "reply": reply(&err)},
        {"name": "notify", "files": ["notify.bin"], "reply": reply(&note)},
    ]);
    let manifest = json!({
        "description": "hwdb RPC test vectors; see PROTOCOL.md. Each vector is one UDP datagram.",
        "magic": proto::MAGIC,
        "version": proto::VERSION,
        "header_len": proto::HEADER_LEN,
        "max_payload": proto::MAX_PAYLOAD,
        "kinds": {"REQUEST": 1, "REQUEST_ACK": 2, "RESPONSE": 3, "RESPONSE_ACK": 4, "NOTIFY": 5, "NOTIFY_ACK": 6, "PING": 7, "PONG": 8},
        "flags": {"RETRANSMIT": proto::FLAG_RETRANSMIT, "UNKNOWN": proto::FLAG_UNKNOWN},
        "vectors": v.iter().map(|x| json!({
            "file": x.file,
            "description": x.description,
            "kind": x.header.kind.name(),
            "conn": x.header.conn,
            "seq": x.header.seq,
            "frag": x.header.frag,
            "count": x.header.count,
            "flags": x.header.flags,
            "payload_len": x.payload.len(),
            "payload": String::from_utf8(x.payload.clone()).expect("vectors use ASCII payloads"),
        })).collect::<Vec<_>>(),
        "messages": messages,
    });
    (v, manifest)
}

#[test]
fn vectors_match_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testvectors");
    let (vectors, manifest) = build();
    let manifest_text = serde_json::to_string_pretty(&manifest).unwrap() + "\n";
    if std::env::var_os("HWDB_REGEN_VECTORS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for v in &vectors {
            std::fs::write(dir.join(&v.file), proto::encode(&v.header, &v.payload)).unwrap();
        }
        std::fs::write(dir.join("manifest.json"), &manifest_text).unwrap();
    }
    for v in &vectors {
        let bytes = std::fs::read(dir.join(&v.file)).unwrap_or_else(|e| panic!("{}: {e}", v.file));
        assert_eq!(bytes, proto::encode(&v.header, &v.payload), "{}", v.file);
        assert!(bytes.len() <= 1400, "{} is {} bytes", v.file, bytes.len());
        let (h, p) = proto::decode(&bytes).unwrap();
        assert_eq!((h, p), (v.header, &v.payload[..]), "{}", v.file);
    }
    let on_disk = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    assert_eq!(on_disk, manifest_text, "manifest.json is stale; regenerate with HWDB_REGEN_VECTORS=1");
}
