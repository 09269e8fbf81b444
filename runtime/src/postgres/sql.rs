//! The schema, its migrations and every statement the store sends, written once with the schema's name
//! in place of `{s}`.

/// The migrations, in order: `schema_version` holds the number of the last one applied.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the requests, their answers and their use.
    "CREATE TABLE {s}.approvals (
        id               bigserial PRIMARY KEY,
        token_sha256     text[] NOT NULL,
        tool             text NOT NULL,
        arguments_digest text NOT NULL,
        shown_digest     text NOT NULL,
        risk             text NOT NULL,
        policy_version   integer NOT NULL,
        agent            text,
        mode             text NOT NULL,
        manifest         jsonb,
        arguments        text,
        created_at       timestamptz NOT NULL DEFAULT now(),
        expires_at       timestamptz NOT NULL,
        answered_at      timestamptz,
        answer           text CHECK (answer IN ('approve', 'reject')),
        answered_by      text,
        reason           text,
        for_session      boolean NOT NULL DEFAULT false,
        stop             boolean NOT NULL DEFAULT false,
        consumed_at      timestamptz,
        CHECK ((answer IS NULL) = (answered_at IS NULL)),
        CHECK (consumed_at IS NULL OR answered_at IS NOT NULL)
    );
    CREATE INDEX approvals_call ON {s}.approvals (tool, arguments_digest);
    CREATE INDEX approvals_token ON {s}.approvals USING gin (token_sha256);
    CREATE INDEX approvals_pending ON {s}.approvals ((coalesce(agent, ''))) WHERE answered_at IS NULL;
    CREATE INDEX approvals_expires ON {s}.approvals (expires_at);",
    // 2: the audit trail, one hash chain per writer, and the signed checkpoints of each chain.
    "CREATE TABLE {s}.audit (
        writer     text NOT NULL,
        seq        bigint NOT NULL CHECK (seq > 0),
        prev_hash  text NOT NULL,
        hash       text NOT NULL,
        stage      text NOT NULL,
        tool       text NOT NULL,
        gate       bigint NOT NULL,
        call       bigint NOT NULL,
        line       text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (writer, seq)
    );
    CREATE TABLE {s}.audit_checkpoints (
        writer     text NOT NULL,
        seq        bigint NOT NULL CHECK (seq > 0),
        head_seq   bigint NOT NULL,
        checkpoint text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (writer, seq)
    );",
    // 3: fleets: the mode every joined gate is held under, its history, and who is joined.
    "CREATE TABLE {s}.fleets (
        name       text PRIMARY KEY,
        mode       text NOT NULL CHECK (mode IN ('SHADOW', 'ADVISORY', 'PARTIAL_AUTO', 'FULL_AUTO')),
        changed_at timestamptz NOT NULL DEFAULT now(),
        changed_by text NOT NULL,
        reason     text NOT NULL
    );
    CREATE TABLE {s}.fleet_changes (
        id         bigserial PRIMARY KEY,
        fleet      text NOT NULL,
        mode       text NOT NULL,
        changed_by text NOT NULL,
        reason     text NOT NULL,
        changed_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {s}.fleet_members (
        fleet        text NOT NULL,
        member       text NOT NULL,
        gate         bigint NOT NULL,
        host         text NOT NULL,
        pid          integer NOT NULL,
        agent        text,
        mode         text NOT NULL,
        partitioned  boolean NOT NULL DEFAULT false,
        joined_at    timestamptz NOT NULL DEFAULT now(),
        last_contact timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (fleet, member, gate)
    );",
    // 4: budgets, a sliding window each: a row per budget holding how many calls its window holds,
    // a row per call it counted, and the one function that takes a call's units, all or none.
    "CREATE TABLE {s}.budgets (
        key  text PRIMARY KEY,
        held integer NOT NULL CHECK (held >= 0)
    );
    CREATE TABLE {s}.budget_uses (
        key     text NOT NULL,
        used_at timestamptz NOT NULL
    );
    CREATE INDEX budget_uses_key ON {s}.budget_uses (key, used_at);
    CREATE FUNCTION {s}.budget_take(keys text[], limits integer[], windows_us bigint[])
    RETURNS bigint[] LANGUAGE plpgsql AS $$
    DECLARE
        now_at  timestamptz := clock_timestamp();
        live    integer;
        oldest  timestamptz;
        worst   integer := 0;
        wait_us bigint := -1;
        this_us bigint;
    BEGIN
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budgets (key, held) VALUES (keys[i], 0) ON CONFLICT (key) DO NOTHING;
            PERFORM 1 FROM {s}.budgets WHERE key = keys[i] FOR UPDATE;
            WITH gone AS (
                DELETE FROM {s}.budget_uses
                WHERE key = keys[i] AND used_at <= now_at - windows_us[i] * interval '1 microsecond'
                RETURNING 1)
            UPDATE {s}.budgets SET held = held - (SELECT count(*) FROM gone)
                WHERE key = keys[i] RETURNING held INTO live;
            IF live >= limits[i] THEN
                SELECT used_at INTO oldest FROM {s}.budget_uses WHERE key = keys[i]
                    ORDER BY used_at OFFSET live - limits[i] LIMIT 1;
                this_us := ceil(extract(epoch FROM oldest + windows_us[i] * interval '1 microsecond'
                    - now_at) * 1000000)::bigint;
                IF this_us > wait_us THEN
                    worst := i;
                    wait_us := this_us;
                END IF;
            END IF;
        END LOOP;
        IF wait_us >= 0 THEN
            RETURN ARRAY[worst - 1, greatest(wait_us, 0)];
        END IF;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budget_uses (key, used_at) VALUES (keys[i], now_at);
            UPDATE {s}.budgets SET held = held + 1 WHERE key = keys[i];
        END LOOP;
        RETURN ARRAY[-1, 0];
    END
    $$;",
    // 5: what an operator is shown beside the call: who the agent acts for, and what tainted its
    // session (the tool whose output is untrusted, and when it ran).
    "ALTER TABLE {s}.approvals
        ADD COLUMN principal  text,
        ADD COLUMN tainted_by text,
        ADD COLUMN tainted_at text;",
    // 6: each writer name of the trail bound at its first use to the role that used it and the public
    // key that signs its checkpoints (none for a writer without checkpoints): the server refuses rows
    // and checkpoints under a name bound to another role, and a sink with another key, or without the
    // name's key, is refused when it connects. The functions run as the schema's owner, so that the
    // sinks' roles need no right on `audit_writers`.
    "CREATE TABLE {s}.audit_writers (
        writer     text PRIMARY KEY,
        role       text NOT NULL,
        public_key text,
        bound_at   timestamptz NOT NULL DEFAULT now()
    );
    CREATE FUNCTION {s}.audit_bind(writer_name text, writer_key text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        bound_role text;
        bound_key  text;
    BEGIN
        -- A role that may not write the trail may not take a writer's name either.
        IF NOT has_table_privilege(session_user, '{s}.audit', 'INSERT') THEN
            RAISE EXCEPTION 'permission denied: role % may not write the audit trail',
                quote_ident(session_user) USING ERRCODE = '42501';
        END IF;
        INSERT INTO {s}.audit_writers (writer, role, public_key)
            VALUES (writer_name, session_user, writer_key)
            ON CONFLICT (writer) DO NOTHING;
        SELECT role, public_key INTO bound_role, bound_key
            FROM {s}.audit_writers WHERE writer = writer_name;
        IF bound_role <> session_user THEN
            RAISE EXCEPTION 'writer % belongs to role %: another role may not write as it',
                quote_literal(writer_name), quote_ident(bound_role) USING ERRCODE = '42501';
        ELSIF bound_key IS NULL AND writer_key IS NOT NULL THEN
            RAISE EXCEPTION 'writer % was first used without a key: a sink that signs checkpoints takes a new writer name',
                quote_literal(writer_name) USING ERRCODE = '42501';
        ELSIF bound_key IS NOT NULL AND writer_key IS NULL THEN
            RAISE EXCEPTION 'writer % signs its checkpoints with a key: a sink without that key may not write as it',
                quote_literal(writer_name) USING ERRCODE = '42501';
        ELSIF bound_key <> writer_key THEN
            RAISE EXCEPTION 'writer % signs its checkpoints with another key',
                quote_literal(writer_name) USING ERRCODE = '42501';
        END IF;
    END
    $$;
    CREATE FUNCTION {s}.audit_writer_bound() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        taken text;
    BEGIN
        INSERT INTO {s}.audit_writers (writer, role)
            SELECT DISTINCT writer, session_user FROM new_rows
            ON CONFLICT (writer) DO NOTHING;
        SELECT n.writer INTO taken FROM new_rows n
            JOIN {s}.audit_writers w ON w.writer = n.writer
            WHERE w.role <> session_user LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'writer % belongs to another role: role % may not write as it',
                quote_literal(taken), quote_ident(session_user) USING ERRCODE = '42501';
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER audit_writer_bound AFTER INSERT ON {s}.audit
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.audit_writer_bound();
    CREATE TRIGGER audit_checkpoint_writer_bound AFTER INSERT ON {s}.audit_checkpoints
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.audit_writer_bound();",
    // 7: a call's units are reserved under its reservation, and given back when the call is refused
    // after its budget check: budget_release deletes exactly that call's uses, locking in key order as
    // budget_take does.
    "ALTER TABLE {s}.budget_uses ADD COLUMN reservation bytea;
    CREATE INDEX budget_uses_reservation ON {s}.budget_uses (reservation)
        WHERE reservation IS NOT NULL;
    CREATE FUNCTION {s}.budget_take(keys text[], limits integer[], windows_us bigint[],
        r bytea)
    RETURNS bigint[] LANGUAGE plpgsql AS $$
    DECLARE
        now_at  timestamptz := clock_timestamp();
        live    integer;
        oldest  timestamptz;
        worst   integer := 0;
        wait_us bigint := -1;
        this_us bigint;
    BEGIN
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budgets (key, held) VALUES (keys[i], 0) ON CONFLICT (key) DO NOTHING;
            PERFORM 1 FROM {s}.budgets WHERE key = keys[i] FOR UPDATE;
            WITH gone AS (
                DELETE FROM {s}.budget_uses
                WHERE key = keys[i] AND used_at <= now_at - windows_us[i] * interval '1 microsecond'
                RETURNING 1)
            UPDATE {s}.budgets SET held = held - (SELECT count(*) FROM gone)
                WHERE key = keys[i] RETURNING held INTO live;
            IF live >= limits[i] THEN
                SELECT used_at INTO oldest FROM {s}.budget_uses WHERE key = keys[i]
                    ORDER BY used_at OFFSET live - limits[i] LIMIT 1;
                this_us := ceil(extract(epoch FROM oldest + windows_us[i] * interval '1 microsecond'
                    - now_at) * 1000000)::bigint;
                IF this_us > wait_us THEN
                    worst := i;
                    wait_us := this_us;
                END IF;
            END IF;
        END LOOP;
        IF wait_us >= 0 THEN
            RETURN ARRAY[worst - 1, greatest(wait_us, 0)];
        END IF;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budget_uses (key, used_at, reservation) VALUES (keys[i], now_at, r);
            UPDATE {s}.budgets SET held = held + 1 WHERE key = keys[i];
        END LOOP;
        RETURN ARRAY[-1, 0];
    END
    $$;
    CREATE FUNCTION {s}.budget_release(keys text[], r bytea)
    RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        gone  integer;
        total integer := 0;
    BEGIN
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            PERFORM 1 FROM {s}.budgets WHERE key = keys[i] FOR UPDATE;
            DELETE FROM {s}.budget_uses WHERE key = keys[i] AND reservation = r;
            GET DIAGNOSTICS gone = ROW_COUNT;
            UPDATE {s}.budgets SET held = held - gone WHERE key = keys[i];
            total := total + gone;
        END LOOP;
        RETURN total;
    END
    $$;",
    // 8: a fleet's operator policy (`policy apply`): its text and digest, and which policy each
    // joined gate follows.
    "ALTER TABLE {s}.fleets ADD COLUMN policy text, ADD COLUMN policy_digest text,
        ADD COLUMN policy_by text, ADD COLUMN policy_at timestamptz;
    ALTER TABLE {s}.fleet_members ADD COLUMN policy_digest text;",
    // 9: irreversible calls: the call's target (typed back to approve an irreversible one), what its
    // evidence probe read of it and that reading's digest (bound into the answer), how the call would be
    // undone, and the target as the approver typed it.
    "ALTER TABLE {s}.approvals
        ADD COLUMN target          text,
        ADD COLUMN irreversible    boolean NOT NULL DEFAULT false,
        ADD COLUMN evidence        text,
        ADD COLUMN evidence_digest text,
        ADD COLUMN rollback        text,
        ADD COLUMN confirmation    text;",
    // 10: what an operator searches the trail by, as columns filled from each row's line when it is
    // written (a line that is not a JSON object leaves them empty), which verification checks against
    // the line; the indexes a search by tool, principal, agent, decision, outcome or code over a time
    // range takes; the pending requests by id, for a paged list; and a notification on channel
    // `toolgate_approvals` (the schema's name as payload) whenever requests change, for pages that
    // follow them live.
    "ALTER TABLE {s}.audit
        ADD COLUMN principal text,
        ADD COLUMN agent     text,
        ADD COLUMN mode      text,
        ADD COLUMN decision  text,
        ADD COLUMN outcome   text,
        ADD COLUMN code      text,
        ADD COLUMN risk      text;
    CREATE FUNCTION {s}.audit_searched() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        j jsonb;
    BEGIN
        BEGIN
            j := NEW.line::jsonb;
        EXCEPTION WHEN others THEN
            j := NULL;
        END;
        IF jsonb_typeof(j) IS DISTINCT FROM 'object' THEN
            j := '{}'::jsonb;
        END IF;
        NEW.principal := j ->> 'principal';
        NEW.agent := j ->> 'agent';
        NEW.mode := j ->> 'mode';
        NEW.decision := j ->> 'decision';
        NEW.outcome := j ->> 'outcome';
        NEW.code := j ->> 'code';
        NEW.risk := j ->> 'declared_risk';
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER audit_searched BEFORE INSERT OR UPDATE ON {s}.audit
        FOR EACH ROW EXECUTE FUNCTION {s}.audit_searched();
    UPDATE {s}.audit SET principal = NULL;
    CREATE INDEX audit_written ON {s}.audit (written_at, writer, seq);
    CREATE INDEX audit_tool ON {s}.audit (tool, written_at);
    CREATE INDEX audit_principal ON {s}.audit (principal, written_at);
    CREATE INDEX audit_agent ON {s}.audit (agent, written_at);
    CREATE INDEX audit_decision ON {s}.audit (decision, written_at);
    CREATE INDEX audit_outcome ON {s}.audit (outcome, written_at);
    CREATE INDEX audit_code ON {s}.audit (code, written_at) WHERE code IS NOT NULL;
    CREATE INDEX audit_call ON {s}.audit (writer, gate, call, seq);
    CREATE INDEX audit_shadow ON {s}.audit (written_at)
        WHERE mode = 'SHADOW' AND stage IN ('enter', 'refused');
    CREATE INDEX approvals_open ON {s}.approvals (id) INCLUDE (expires_at)
        WHERE answered_at IS NULL;
    CREATE FUNCTION {s}.approvals_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('toolgate_approvals', TG_TABLE_SCHEMA);
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER approvals_changed AFTER INSERT OR UPDATE OR DELETE ON {s}.approvals
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.approvals_changed();",
    // 11: the gate that filed a request (a random id, shared by its clones, never another gate's):
    // an answer for the session grants only to it. A budget check stamps its call once it holds its
    // budgets' rows, not when it started: a check that waited on a lock counts from when it was
    // allowed.
    "ALTER TABLE {s}.approvals ADD COLUMN gate text;
    CREATE OR REPLACE FUNCTION {s}.budget_take(keys text[], limits integer[], windows_us bigint[],
        r bytea)
    RETURNS bigint[] LANGUAGE plpgsql AS $$
    DECLARE
        now_at  timestamptz;
        live    integer;
        oldest  timestamptz;
        worst   integer := 0;
        wait_us bigint := -1;
        this_us bigint;
    BEGIN
        LOCK TABLE {s}.budget_uses IN ROW EXCLUSIVE MODE;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budgets (key, held) VALUES (keys[i], 0) ON CONFLICT (key) DO NOTHING;
            PERFORM 1 FROM {s}.budgets WHERE key = keys[i] FOR UPDATE;
        END LOOP;
        now_at := clock_timestamp();
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            WITH gone AS (
                DELETE FROM {s}.budget_uses
                WHERE key = keys[i] AND used_at <= now_at - windows_us[i] * interval '1 microsecond'
                RETURNING 1)
            UPDATE {s}.budgets SET held = held - (SELECT count(*) FROM gone)
                WHERE key = keys[i] RETURNING held INTO live;
            IF live >= limits[i] THEN
                SELECT used_at INTO oldest FROM {s}.budget_uses WHERE key = keys[i]
                    ORDER BY used_at OFFSET live - limits[i] LIMIT 1;
                this_us := ceil(extract(epoch FROM oldest + windows_us[i] * interval '1 microsecond'
                    - now_at) * 1000000)::bigint;
                IF this_us > wait_us THEN
                    worst := i;
                    wait_us := this_us;
                END IF;
            END IF;
        END LOOP;
        IF wait_us >= 0 THEN
            RETURN ARRAY[worst - 1, greatest(wait_us, 0)];
        END IF;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budget_uses (key, used_at, reservation) VALUES (keys[i], now_at, r);
            UPDATE {s}.budgets SET held = held + 1 WHERE key = keys[i];
        END LOOP;
        RETURN ARRAY[-1, 0];
    END
    $$;",
    // 12: a fleet's policy in force, kept: the last policy a member accepted (checked against its
    // tools), which a process that joins follows when it cannot check the one applied last; the tools
    // each member declares, which `policy apply` checks a file against before storing it; and the one
    // way a member's role records an acceptance, of the policy applied last and no other text.
    "ALTER TABLE {s}.fleets ADD COLUMN accepted_policy text, ADD COLUMN accepted_digest text,
        ADD COLUMN accepted_by text, ADD COLUMN accepted_at timestamptz;
    CREATE TABLE {s}.fleet_tools (
        fleet       text NOT NULL,
        id          text NOT NULL,
        names       text[] NOT NULL,
        parameters  text,
        redact      text[] NOT NULL,
        member      text NOT NULL,
        declared_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (fleet, id)
    );
    CREATE FUNCTION {s}.fleet_policy_accepted(fleet_name text, digest text)
    RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        UPDATE {s}.fleets SET accepted_policy = policy, accepted_digest = policy_digest,
            accepted_by = policy_by, accepted_at = now()
        WHERE name = fleet_name AND policy_digest = digest
            AND accepted_digest IS DISTINCT FROM digest
        RETURNING true
    $$;
    REVOKE EXECUTE ON FUNCTION {s}.fleet_policy_accepted(text, text) FROM PUBLIC;",
    // 13: an operator's reset of budgets: the uses of the budgets it names deleted, each budget's row
    // locked in key order as budget_take locks it, and a record of who reset what, when, why and how
    // many calls each window held, in the same transaction. The function runs as the schema's owner,
    // so that the operators' role needs no right on `budget_uses`: a reset it makes leaves its record.
    "CREATE TABLE {s}.budget_resets (
        id       bigserial PRIMARY KEY,
        reset_at timestamptz NOT NULL,
        reset_by text NOT NULL,
        role     text NOT NULL,
        reason   text NOT NULL,
        selected text NOT NULL,
        keys     text[] NOT NULL,
        cleared  integer[] NOT NULL
    );
    CREATE FUNCTION {s}.budget_reset(budget_keys text[], by_name text, why text, selection text)
    RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        sorted    text[];
        window_ns text;
        now_at    timestamptz;
        live      integer;
        counts    integer[] := '{}';
        record_id bigint;
    BEGIN
        IF coalesce(btrim(by_name), '') = '' OR coalesce(btrim(why), '') = '' THEN
            RAISE EXCEPTION 'a reset of budgets names who makes it and why' USING ERRCODE = '22023';
        END IF;
        -- Each key once, in the order of its bytes: the order budget_take locks in.
        SELECT coalesce(array_agg(k ORDER BY k COLLATE \"C\"), '{}')
            INTO sorted
            FROM (SELECT DISTINCT k FROM unnest(budget_keys) AS given(k) WHERE k IS NOT NULL) AS once;
        LOCK TABLE {s}.budget_uses IN ROW EXCLUSIVE MODE;
        FOR i IN 1 .. cardinality(sorted) LOOP
            PERFORM 1 FROM {s}.budgets WHERE key = sorted[i] FOR UPDATE;
        END LOOP;
        now_at := clock_timestamp();
        FOR i IN 1 .. cardinality(sorted) LOOP
            -- The window is the key's own (its last field, in nanoseconds, after the limit), never
            -- the caller's: the record says how many calls the window held, whoever resets.
            window_ns := substring(sorted[i] from '\\x1f[0-9]+\\x1f([0-9]+)$');
            WITH gone AS (
                DELETE FROM {s}.budget_uses WHERE key = sorted[i] RETURNING used_at)
            SELECT count(*) FILTER (WHERE window_ns IS NULL
                    OR used_at > now_at - make_interval(secs => window_ns::float8 / 1e9))
                INTO live FROM gone;
            UPDATE {s}.budgets SET held = 0 WHERE key = sorted[i];
            counts := counts || live;
        END LOOP;
        INSERT INTO {s}.budget_resets (reset_at, reset_by, role, reason, selected, keys, cleared)
            VALUES (now_at, by_name, session_user, why, selection, sorted, counts)
            RETURNING id INTO record_id;
        RETURN record_id;
    END
    $$;
    REVOKE EXECUTE ON FUNCTION {s}.budget_reset(text[], text, text, text) FROM PUBLIC;",
    // 14: a take under a reservation that holds a unit of a budget already charges that budget
    // nothing: the commit point of a decision that waited for its approver takes its units again,
    // so that a unit an operator's reset cleared, or that left its window, while the approver
    // thought is taken anew, within the limit as it is then, or the call refused.
    "CREATE OR REPLACE FUNCTION {s}.budget_take(keys text[], limits integer[], windows_us bigint[],
        r bytea)
    RETURNS bigint[] LANGUAGE plpgsql AS $$
    DECLARE
        now_at  timestamptz;
        live    integer;
        oldest  timestamptz;
        worst   integer := 0;
        wait_us bigint := -1;
        this_us bigint;
        mine    boolean[] := '{}';
    BEGIN
        LOCK TABLE {s}.budget_uses IN ROW EXCLUSIVE MODE;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budgets (key, held) VALUES (keys[i], 0) ON CONFLICT (key) DO NOTHING;
            PERFORM 1 FROM {s}.budgets WHERE key = keys[i] FOR UPDATE;
        END LOOP;
        now_at := clock_timestamp();
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            WITH gone AS (
                DELETE FROM {s}.budget_uses
                WHERE key = keys[i] AND used_at <= now_at - windows_us[i] * interval '1 microsecond'
                RETURNING 1)
            UPDATE {s}.budgets SET held = held - (SELECT count(*) FROM gone)
                WHERE key = keys[i] RETURNING held INTO live;
            mine := mine || (r IS NOT NULL AND EXISTS (
                SELECT 1 FROM {s}.budget_uses WHERE key = keys[i] AND reservation = r));
            IF NOT mine[i] AND live >= limits[i] THEN
                SELECT used_at INTO oldest FROM {s}.budget_uses WHERE key = keys[i]
                    ORDER BY used_at OFFSET live - limits[i] LIMIT 1;
                this_us := ceil(extract(epoch FROM oldest + windows_us[i] * interval '1 microsecond'
                    - now_at) * 1000000)::bigint;
                IF this_us > wait_us THEN
                    worst := i;
                    wait_us := this_us;
                END IF;
            END IF;
        END LOOP;
        IF wait_us >= 0 THEN
            RETURN ARRAY[worst - 1, greatest(wait_us, 0)];
        END IF;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            IF NOT mine[i] THEN
                INSERT INTO {s}.budget_uses (key, used_at, reservation) VALUES (keys[i], now_at, r);
                UPDATE {s}.budgets SET held = held + 1 WHERE key = keys[i];
            END IF;
        END LOOP;
        RETURN ARRAY[-1, 0];
    END
    $$;",
    // 15: the charges of the operator's rules over history, told apart by a negative limit: -1 a
    // mark (a unit taken whatever the budget holds), -2 a requirement (refused unless the budget
    // holds a unit in its window; nothing taken), -3 a prohibition (refused while it holds one,
    // until the newest leaves; nothing taken).
    "CREATE OR REPLACE FUNCTION {s}.budget_take(keys text[], limits integer[], windows_us bigint[],
        r bytea)
    RETURNS bigint[] LANGUAGE plpgsql AS $$
    DECLARE
        now_at  timestamptz;
        live    integer;
        oldest  timestamptz;
        worst   integer := 0;
        wait_us bigint := -1;
        this_us bigint;
        mine    boolean[] := '{}';
    BEGIN
        LOCK TABLE {s}.budget_uses IN ROW EXCLUSIVE MODE;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            INSERT INTO {s}.budgets (key, held) VALUES (keys[i], 0) ON CONFLICT (key) DO NOTHING;
            PERFORM 1 FROM {s}.budgets WHERE key = keys[i] FOR UPDATE;
        END LOOP;
        now_at := clock_timestamp();
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            -- A requirement or a prohibition reads the others' units within its own window and
            -- takes none out: several rules read one history over windows of their own.
            IF limits[i] IN (-2, -3) THEN
                SELECT max(used_at) INTO oldest FROM {s}.budget_uses
                    WHERE key = keys[i] AND reservation IS DISTINCT FROM r
                    AND used_at > now_at - windows_us[i] * interval '1 microsecond';
                IF limits[i] = -2 AND oldest IS NULL AND wait_us < 0 THEN
                    worst := i;
                    wait_us := 0;
                ELSIF limits[i] = -3 AND oldest IS NOT NULL THEN
                    this_us := greatest(ceil(extract(epoch FROM oldest
                        + windows_us[i] * interval '1 microsecond' - now_at) * 1000000)::bigint, 0);
                    IF this_us > wait_us THEN
                        worst := i;
                        wait_us := this_us;
                    END IF;
                END IF;
                mine := mine || false;
                CONTINUE;
            END IF;
            WITH gone AS (
                DELETE FROM {s}.budget_uses
                WHERE key = keys[i] AND used_at <= now_at - windows_us[i] * interval '1 microsecond'
                RETURNING 1)
            UPDATE {s}.budgets SET held = held - (SELECT count(*) FROM gone)
                WHERE key = keys[i] RETURNING held INTO live;
            mine := mine || (r IS NOT NULL AND EXISTS (
                SELECT 1 FROM {s}.budget_uses WHERE key = keys[i] AND reservation = r));
            IF limits[i] = -1 THEN
                CONTINUE;
            END IF;
            IF NOT mine[i] AND live >= limits[i] THEN
                SELECT used_at INTO oldest FROM {s}.budget_uses WHERE key = keys[i]
                    ORDER BY used_at OFFSET live - limits[i] LIMIT 1;
                this_us := ceil(extract(epoch FROM oldest + windows_us[i] * interval '1 microsecond'
                    - now_at) * 1000000)::bigint;
                IF this_us > wait_us THEN
                    worst := i;
                    wait_us := this_us;
                END IF;
            END IF;
        END LOOP;
        IF wait_us >= 0 THEN
            RETURN ARRAY[worst - 1, greatest(wait_us, 0)];
        END IF;
        FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
            IF NOT mine[i] AND limits[i] NOT IN (-2, -3) THEN
                INSERT INTO {s}.budget_uses (key, used_at, reservation) VALUES (keys[i], now_at, r);
                UPDATE {s}.budgets SET held = held + 1 WHERE key = keys[i];
            END IF;
        END LOOP;
        RETURN ARRAY[-1, 0];
    END
    $$;",
];

/// Creates the schema and the version table if missing, under a lock that makes concurrent first
/// connections wait for each other.
pub(super) const PREPARE_SCHEMA: &str = "
    CREATE SCHEMA IF NOT EXISTS {s};
    CREATE TABLE IF NOT EXISTS {s}.schema_version (
        version    integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    );";

pub(super) const SCHEMA_VERSION: &str = "SELECT coalesce(max(version), 0) FROM {s}.schema_version";

pub(super) const RECORD_VERSION: &str = "INSERT INTO {s}.schema_version (version) VALUES ($1)";

/// The binding's fields but the evidence's digest, as `$1` to `$9` (`$9` the target, NULL for none).
const SAME_CALL: &str = "tool = $1 AND arguments_digest = $2 AND shown_digest = $3 AND risk = $4
    AND policy_version = $5 AND coalesce(principal, '') = $6 AND coalesce(agent, '') = $7
    AND (tainted_by IS NOT NULL) = $8 AND target IS NOT DISTINCT FROM $9::text";

/// The binding's fields, as `$1` to `$10` (`$10` the evidence's digest, NULL for none).
const SAME_BINDING: &str = "tool = $1 AND arguments_digest = $2 AND shown_digest = $3 AND risk = $4
    AND policy_version = $5 AND coalesce(principal, '') = $6 AND coalesce(agent, '') = $7
    AND (tainted_by IS NOT NULL) = $8 AND target IS NOT DISTINCT FROM $9::text
    AND evidence_digest IS NOT DISTINCT FROM $10::text";

/// Uses the oldest live answer to exactly this call, in one statement. Of concurrent statements, one
/// locks the row; the others skip it (and find another answer, or none), and one that reads it after
/// the winner committed re-checks `consumed_at` on the new row version (READ COMMITTED), so no answer is
/// used twice. Expiry is read by the clock as the statement runs (`clock_timestamp()`), not as it
/// started (`now()`): a statement that waited on a lock past the request's expiry uses nothing. An
/// answer for the session stays one only for the gate that filed the request (`$11`); the last
/// column is how long the request has left, in seconds.
pub(super) fn consume() -> String {
    format!(
        "UPDATE {{s}}.approvals SET consumed_at = now()
         WHERE id = (
             SELECT id FROM {{s}}.approvals
             WHERE {SAME_BINDING} AND answered_at IS NOT NULL AND consumed_at IS NULL
               AND expires_at > clock_timestamp()
             ORDER BY id
             LIMIT 1
             FOR UPDATE SKIP LOCKED)
           AND consumed_at IS NULL
         RETURNING answer, answered_by, reason,
             for_session AND coalesce(gate = $11::text, false), stop, confirmation,
             extract(epoch FROM expires_at - clock_timestamp())::float8"
    )
}

/// Why a call found no answer: `expired`, `used` (or being used by a call racing this one), `changed`
/// (a live approval of this call for another state of its target: the evidence's digest differs), and
/// `mismatch` (a live approval of the tool for another binding). The caller tells them in that order.
pub(super) fn why_waiting() -> String {
    format!(
        "SELECT
             coalesce(bool_or(same AND answered_at IS NOT NULL AND consumed_at IS NULL
                 AND expires_at <= now()), false),
             coalesce(bool_or(same AND (consumed_at IS NOT NULL
                 OR (answered_at IS NOT NULL AND expires_at > now()))), false),
             coalesce(bool_or(same_call AND NOT same AND answer = 'approve'
                 AND consumed_at IS NULL AND expires_at > now()), false),
             coalesce(bool_or(NOT same AND answer = 'approve' AND consumed_at IS NULL
                 AND expires_at > now()), false)
         FROM (SELECT *, ({SAME_BINDING}) AS same, ({SAME_CALL}) AS same_call
               FROM {{s}}.approvals WHERE tool = $1) AS requests"
    )
}

/// Spends the live approvals of this call (`$1` to `$10`) given for another state of its target: the
/// world they were for is gone, and the target coming back to that state does not bring them back.
pub(super) fn spend_other_states() -> String {
    format!(
        "UPDATE {{s}}.approvals SET consumed_at = now()
         WHERE {SAME_CALL} AND evidence_digest IS DISTINCT FROM $10::text AND answer = 'approve'
           AND consumed_at IS NULL AND expires_at > now()"
    )
}

/// Serializes the requests of one agent (`$1`) across processes, until the transaction ends; also the
/// migrations.
pub(super) const LOCK_AGENT: &str = "SELECT pg_advisory_xact_lock($1)";

/// The live pending request for exactly this call (its principal and agent included).
pub(super) fn find_pending() -> String {
    format!(
        "SELECT id FROM {{s}}.approvals
         WHERE {SAME_BINDING} AND answered_at IS NULL
           AND expires_at > now()
         ORDER BY id
         LIMIT 1"
    )
}

/// Adds a token's hash (`$2`) to a pending request, keeping the newest `$3`.
pub(super) const ADD_TOKEN: &str = "UPDATE {s}.approvals
    SET token_sha256 = (token_sha256 || $2::text)[greatest(1, cardinality(token_sha256) + 2 - $3::integer):]
    WHERE id = $1";

/// How many live pending requests the agent (`$1`) holds, counted up to `$2`.
pub(super) const COUNT_PENDING: &str = "SELECT count(*) FROM (
        SELECT 1 FROM {s}.approvals
        WHERE coalesce(agent, '') = $1 AND answered_at IS NULL AND expires_at > now()
        LIMIT $2) AS held";

pub(super) const INSERT: &str = "INSERT INTO {s}.approvals (token_sha256, tool, arguments_digest,
        shown_digest, risk, policy_version, agent, mode, manifest, arguments, expires_at, principal,
        tainted_by, tainted_at, target, irreversible, evidence, evidence_digest, rollback, gate)
    VALUES (ARRAY[$1::text], $2, $3, $4, $5, $6, $7, $8, $9::text::jsonb, $10,
        now() + $11::bigint * interval '1 millisecond', $12, $13, $14, $15, $16, $17, $18, $19,
        $20)
    RETURNING id";

/// Forgets requests one time-to-live (`$1`, milliseconds) after they expired.
pub(super) const PRUNE: &str =
    "DELETE FROM {s}.approvals WHERE expires_at < now() - $1::bigint * interval '1 millisecond'";

/// A request as operators see it; [`super::request_of`] reads it by position.
pub(super) const REQUEST: &str =
    "id, tool, arguments_digest, shown_digest, risk, policy_version, agent, mode,
    manifest::text, arguments,
    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
    extract(epoch FROM now() - created_at)::float8,
    extract(epoch FROM expires_at - now())::float8,
    answer, answered_by, reason, for_session, stop, consumed_at IS NOT NULL,
    principal, tainted_by, tainted_at,
    target, irreversible, evidence, evidence_digest, rollback, confirmation";

/// Answers the live pending request that `$1` names (`token_sha256 @> ARRAY[$1]` or `id = $1`) with
/// `$2` (`approve` or `reject`), by `$3`, for `$4`, and `$7` the target typed back. An approval of an
/// irreversible request answers it only where `$7` is its target, byte for byte: the check is part of
/// the one statement that answers, so no approval without it is ever written, whoever races it. An
/// irreversible call is never granted for the session.
///
/// A rejection that stops (`$6`) is given, in the same statement, to every other request of the same
/// agent and principal not yet used, answered or not: whichever of them the agent makes again, it
/// reads the stop, and nothing of it runs after one.
pub(super) fn answer(request: &str) -> String {
    format!(
        "WITH answered AS (
             UPDATE {{s}}.approvals
             SET answered_at = now(), answer = $2, answered_by = $3, reason = $4,
                 for_session = $5 AND NOT irreversible, stop = $6,
                 confirmation = CASE WHEN $2 = 'approve' THEN $7::text END
             WHERE {request} AND answered_at IS NULL AND expires_at > now()
               AND (NOT irreversible OR $2 <> 'approve'
                    OR coalesce(target = $7::text COLLATE \"C\", false))
             RETURNING {REQUEST}, id AS stopped_id, agent AS stopped_agent,
                 principal AS stopped_principal),
         stopped AS (
             UPDATE {{s}}.approvals o
             SET answered_at = now(), answer = 'reject', answered_by = $3, reason = $4,
                 for_session = false, stop = true, confirmation = NULL
             FROM answered a
             WHERE $6 AND o.id <> a.stopped_id AND o.agent IS NOT DISTINCT FROM a.stopped_agent
               AND o.principal IS NOT DISTINCT FROM a.stopped_principal
               AND o.consumed_at IS NULL AND o.expires_at > now()
             RETURNING o.id)
         SELECT * FROM answered"
    )
}

/// Why a request could not be answered: expired, answered, used; and whether it is irreversible, and
/// its target, for an approval that did not carry it.
pub(super) fn why_not_answered(request: &str) -> String {
    format!(
        "SELECT expires_at <= now(), answered_at IS NOT NULL, consumed_at IS NOT NULL, irreversible,
             target
         FROM {{s}}.approvals WHERE {request} ORDER BY id DESC LIMIT 1"
    )
}

pub(super) const BY_TOKEN: &str = "token_sha256 @> ARRAY[$1::text]";
pub(super) const BY_ID: &str = "id = $1::bigint";

pub(super) fn list() -> String {
    format!(
        "SELECT {REQUEST} FROM {{s}}.approvals
         WHERE answered_at IS NULL AND expires_at > now()
         ORDER BY id"
    )
}

pub(super) fn show() -> String {
    format!("SELECT {REQUEST} FROM {{s}}.approvals WHERE id = $1")
}

/// Takes a call's units of its budgets (`$1` keys, sorted, `$2` limits, `$3` windows in microseconds),
/// all or none, in one statement: `{-1, 0}` taken, else the 0-based index of the budget to wait
/// longest for and how long, in microseconds. Each budget's row is locked in key order, so that
/// statements of any number of processes serialize on the budgets they share and never deadlock, and
/// each read after its lock sees the rows as the last statement committed them.
pub(super) const BUDGET_TAKE: &str =
    "SELECT {s}.budget_take($1::text[], $2::integer[], $3::bigint[], $4::bytea)";

/// Gives back the units one reservation (`$2`) took of its budgets (`$1` keys, sorted): the call was
/// refused after its budget check.
pub(super) const BUDGET_RELEASE: &str = "SELECT {s}.budget_release($1::text[], $2::bytea)";
