//! Pipeline stages (stub).
