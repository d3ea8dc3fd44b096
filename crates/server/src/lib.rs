//! shortfirst-server: see ARCHITECTURE.md.
