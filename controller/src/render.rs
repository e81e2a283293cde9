//! Scaffolding: filled in by the controller work (issue 5).
