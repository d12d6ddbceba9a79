ALTER TABLE ms_smt_namespaces ADD COLUMN journal_from BIGINT;
    CREATE TABLE ms_smt_changes (
        ns BIGINT NOT NULL,
        version BIGINT NOT NULL,
        key BYTEA NOT NULL,
        old_value BYTEA NOT NULL,
        old_sum BIGINT NOT NULL,
        new_value BYTEA NOT NULL,
        new_sum BIGINT NOT NULL,
        PRIMARY KEY (ns, version, key)
    );
    CREATE TABLE ms_smt_versions (
        ns BIGINT NOT NULL,
        version BIGINT NOT NULL,
        root_hash BYTEA,
        root_sum BIGINT,
        at BIGINT NOT NULL,
        PRIMARY KEY (ns, version)
    );
    CREATE INDEX ms_smt_versions_root ON ms_smt_versions (ns, root_hash);
