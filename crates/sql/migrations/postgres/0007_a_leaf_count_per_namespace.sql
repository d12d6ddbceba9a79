ALTER TABLE ms_smt_namespaces ADD COLUMN leaves BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE ms_smt_namespaces ADD COLUMN leaves_since BIGINT;
    UPDATE ms_smt_namespaces SET leaves_since = version WHERE root_hash IS NOT NULL;
