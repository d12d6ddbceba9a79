CREATE TABLE IF NOT EXISTS ms_smt_tokens (
    id TEXT PRIMARY KEY NOT NULL,
    hash BYTEA NOT NULL UNIQUE,
    label TEXT NOT NULL,
    grants TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT
);
