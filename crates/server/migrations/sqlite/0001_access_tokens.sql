CREATE TABLE IF NOT EXISTS ms_smt_tokens (
    id TEXT PRIMARY KEY NOT NULL,
    hash BLOB NOT NULL UNIQUE,
    label TEXT NOT NULL,
    grants TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER
);
