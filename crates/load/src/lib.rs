//! shortfirst-load: see ARCHITECTURE.md.
