//! Test fixtures: real PostgreSQL clusters made by initdb for each version, and corruptors.
