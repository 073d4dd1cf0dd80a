package sqlite

// Scheme is the kine endpoint scheme of this backend: Scheme://<path>?<kine's
// SQLite parameters>.
const Scheme = "kplane-sqlite"
