"""The API's blueprints, one concern each (README's layout table says which holds what)."""

from . import accounts, apps, bedtime, devices, events, latency, page, portal, radio, satellites, updates, wifi_keys

BLUEPRINTS = (
    page.bp,
    portal.bp,
    accounts.bp,
    devices.bp,
    bedtime.bp,
    wifi_keys.bp,
    apps.bp,
    latency.bp,
    events.bp,
    updates.bp,
    radio.bp,
    satellites.bp,
)
