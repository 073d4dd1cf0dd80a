// Package sqlite is kine's SQLite backend with the statements kine runs
// prepared once per connection instead of on every call.
//
// kine hands each query to database/sql as text, and the pure-Go SQLite
// driver parses and plans it again every time: for kine's nested queries
// that was about 40 % of the CPU a datastore read or write costs. The
// backend kine builds (its schema, dialect and log) is kept whole; only its
// connection pool is replaced by one whose connections keep their prepared
// statements (statementCache) and whose writers take turns at a gate
// instead of in SQLite's busy handler (writeGate). The endpoint is
// Scheme://<path>. Built with cgo, kine's SQLite is the C library and kine's backend serves unchanged.
package sqlite
