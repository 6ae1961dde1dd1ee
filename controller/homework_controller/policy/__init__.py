"""Pure policy the concerns share: DHCP's decisions (`dhcp`), DNS rules and answers (`dns_rules`), DHCP clients'
fingerprints compared (`fingerprints`), weekly windows (`schedules`), devices' own passphrases (`wifi_keys`), the
app table and priorities (`apps`, `qos`), the slice's downlink rules (`downlink`). Imports flows, wire and the
root's vocabulary; no concern."""
