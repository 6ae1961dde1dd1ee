"""The switch's side of the edge: its connection (`switch_connection`), the order the controller serves in
(`fair_serving`, with `fairness` and `held`), the sink every effect is carried out by (`sink`), and the router's
callers beside the switch's events, which hand their effects to fair serving as well: hostapd's station events,
the periodic jobs and the calls of the services (`station_events`, `periodic`, `service_calls`)."""
