"""The concerns: each owns its state about devices and answers the lifecycle (`lifecycle.Concern`); some with
parts of their own (the controls' gates `pauses` and `allowances` and those plugged in, `gates/`,
`app_priorities`' `ahead_marks`, `ipv6`'s `border_routes`). A concern imports policy, flows, wire and the
root's vocabulary; never another concern, nor core, api, radio or edge."""
