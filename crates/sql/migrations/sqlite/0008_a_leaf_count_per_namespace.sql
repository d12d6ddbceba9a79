ALTER TABLE ms_smt_namespaces ADD COLUMN leaves INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE ms_smt_namespaces ADD COLUMN leaves_since INTEGER;
    UPDATE ms_smt_namespaces SET leaves_since = version WHERE root_hash IS NOT NULL;
