from homework_controller.stations import Station, link_rows, parse_station_dump

DUMP = """Station 02:5E:EC:0D:C4:19 (on wlan0)
\tinactive time:\t304 ms
\trx bytes:\t18816
\trx packets:\t75
\ttx bytes:\t5386
\ttx packets:\t21
\ttx retries:\t4
\ttx failed:\t0
\tsignal:  \t-61 [-61, -63] dBm
\tsignal avg:\t-60 dBm
Station 02:00:00:00:00:02 (on wlan0)
\trx packets:\t10
\ttx packets:\t0
\ttx retries:\t0
\tsignal:  \t-80 dBm
"""


def test_iw_station_dump_is_read_per_station():
    stations = parse_station_dump(DUMP)
    assert stations["02:5e:ec:0d:c4:19"] == Station("02:5e:ec:0d:c4:19", -61, 4, 96)
    assert stations["02:00:00:00:00:02"].signal_dbm == -80


def test_links_rows_count_retries_and_packets_per_interval():
    before = parse_station_dump(DUMP)
    later = dict(before, **{"02:5e:ec:0d:c4:19": Station("02:5e:ec:0d:c4:19", -70, 10, 196)})
    assert link_rows(before, later) == [("02:00:00:00:00:02", -80, 0, 0), ("02:5e:ec:0d:c4:19", -70, 6, 100)]
    # A station that re-associated restarts its counters: what it has now is this interval's.
    again = {"02:5e:ec:0d:c4:19": Station("02:5e:ec:0d:c4:19", -65, 1, 5)}
    assert link_rows(later, again) == [("02:5e:ec:0d:c4:19", -65, 1, 5)]
