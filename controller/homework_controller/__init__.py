"""The Homework controller. The root holds the vocabulary every layer shares (`model`, `effects`, `errors`,
`lifecycle`, `store`) and the command line (`config`, `__main__`); the sub-packages are its layers, top to
bottom: edge, api, core | radio, concerns, policy, flows, wire (the repository's pyproject.toml holds the
import-linter contracts `make lint` checks)."""
