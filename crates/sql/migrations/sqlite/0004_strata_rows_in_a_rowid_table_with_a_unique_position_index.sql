ALTER TABLE ms_smt_strata RENAME TO ms_smt_strata_v2;
    CREATE TABLE ms_smt_strata (
        id INTEGER PRIMARY KEY,
        ns INTEGER NOT NULL,
        path BLOB NOT NULL,
        depth INTEGER NOT NULL,
        body BLOB NOT NULL
    );
    INSERT INTO ms_smt_strata (ns, path, depth, body)
        SELECT ns, path, depth, body FROM ms_smt_strata_v2 ORDER BY ns, path, depth;
    DROP TABLE ms_smt_strata_v2;
    CREATE UNIQUE INDEX ms_smt_strata_position ON ms_smt_strata (ns, path, depth);
