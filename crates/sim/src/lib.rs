//! shortfirst-sim: see ARCHITECTURE.md.
