"""What flows between the router and the services beside it, other than the switch's OpenFlow and the LAN's
sockets: hwdb's feed of app priorities and agents' reports in (`hwdb_feed`) and its rows out (`hwdb_log`), the
switch's own per-connection records (`flow_export`, IPFIX), the ISP slice's rules (`slice_link`) and the log
(`log_writer`). Each runs on threads of its own and knows nothing of the rest of the edge."""
