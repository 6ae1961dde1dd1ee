from homework_controller.edge.feeds.hwdb_log import HwdbLog, insert_statement


def test_rows_become_one_batched_insert_with_quotes_escaped():
    assert insert_statement(
        "Events",
        [("new-device", "02:00:00:00:00:01", "Tom's phone asks to join"), ("flow-budget", "02:00:00:00:00:02", "x")],
    ) == (
        "insert into Events values ('new-device', '02:00:00:00:00:01', 'Tom''s phone asks to join'), "
        "('flow-budget', '02:00:00:00:00:02', 'x')"
    )


def test_an_unreachable_hwdb_drops_rows_without_raising():
    class Down:
        def query(self, text):
            raise OSError("connection refused")

    log = HwdbLog(None)
    log.address, log._client_factory = "127.0.0.1:1", Down
    log._send("Leases", [("m", "ip", "h", "granted", "pending")])
    assert log.dropped == 1 and log.written == 0
