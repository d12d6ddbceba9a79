ALTER TABLE ms_smt_namespaces ADD COLUMN journal_from INTEGER;
    CREATE TABLE ms_smt_changes (
        ns INTEGER NOT NULL,
        version INTEGER NOT NULL,
        key BLOB NOT NULL,
        old_value BLOB NOT NULL,
        old_sum INTEGER NOT NULL,
        new_value BLOB NOT NULL,
        new_sum INTEGER NOT NULL,
        PRIMARY KEY (ns, version, key)
    );
    CREATE TABLE ms_smt_versions (
        ns INTEGER NOT NULL,
        version INTEGER NOT NULL,
        root_hash BLOB,
        root_sum INTEGER,
        at INTEGER NOT NULL,
        PRIMARY KEY (ns, version)
    );
    CREATE INDEX ms_smt_versions_root ON ms_smt_versions (ns, root_hash);
