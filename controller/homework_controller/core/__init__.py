"""The core: `HomeRouter` (state and event in, effects out) and the parts that sequence events involving several
concerns (`reconciler`, `joining`, `flow_events`, `decisions`). Imports the concerns and the layers below them;
never api, radio or edge."""
