//! shortfirst-gatekeeper: see ARCHITECTURE.md.
