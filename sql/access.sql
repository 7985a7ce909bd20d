-- micromegas_views: micromegas' query deny list and audience grants,
-- as validated Postgres state. Every write path (the functions below, a
-- direct INSERT/UPDATE/DELETE by an admin) goes through the same triggers:
-- a deny rule is compiled with DataFusion before it is stored, the cap is
-- counted under a lock, a grant's audience, axis and selector are checked,
-- and every committed change is announced. The privileges and the pg_dump
-- configuration are in api.sql with the others.

-- <tables>
-- One row: the lock deny-list writers count the cap under, and the
-- versions the announcements carry.
CREATE TABLE micromegas.access_state (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  deny_list_version bigint NOT NULL DEFAULT 0,
  audience_grants_version bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE micromegas.access_state IS
  'The versions of the deny list and of the audience grants (one row); services reload when one moves';
COMMENT ON COLUMN micromegas.access_state.singleton IS 'Always true: the table has one row';
COMMENT ON COLUMN micromegas.access_state.deny_list_version IS 'Moves with every change to query_deny_list';
COMMENT ON COLUMN micromegas.access_state.audience_grants_version IS 'Moves with every change to audience_grants';
INSERT INTO micromegas.access_state DEFAULT VALUES;

CREATE TABLE micromegas.query_deny_list (
  rule_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  created_at timestamptz NOT NULL,
  created_by varchar(255) NOT NULL,
  reason text NOT NULL,
  match_expr text NOT NULL
);
COMMENT ON COLUMN micromegas.query_deny_list.rule_id IS 'The rule';
COMMENT ON COLUMN micromegas.query_deny_list.created_at IS 'When it was added';
COMMENT ON COLUMN micromegas.query_deny_list.created_by IS 'The actor who added it';
COMMENT ON COLUMN micromegas.query_deny_list.reason IS 'Why queries are denied (shown to the caller)';
COMMENT ON COLUMN micromegas.query_deny_list.match_expr IS 'The boolean expression over the query''s attributes';
COMMENT ON TABLE micromegas.query_deny_list IS
  'Query deny list: a FlightSQL query whose context makes match_expr TRUE is rejected';

-- <deny hits>
-- When each rule last fired, as the services report it. A table of its own,
-- with no foreign key: recording a hit never locks a rule, so a service can
-- never hold up remove_query_denial (the listings join it back as seed
-- 002's last_hit_at).
CREATE TABLE micromegas.query_deny_hits (
  rule_id uuid PRIMARY KEY,
  last_hit_at timestamptz NOT NULL
);
COMMENT ON COLUMN micromegas.query_deny_hits.rule_id IS 'The rule';
COMMENT ON COLUMN micromegas.query_deny_hits.last_hit_at IS 'When it last denied a query';
COMMENT ON TABLE micromegas.query_deny_hits IS
  'The last time each deny rule matched a query, recorded by the services (mm_record_query_denial_hits)';
-- </deny hits>

-- The audience rules, in one place: the table's CHECK and the functions'
-- messages both come from here. NULL when the row is valid.
CREATE FUNCTION micromegas._mm_audience_problem(audience text, axis text, selector text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE
    WHEN audience IS NULL OR audience !~ '^[A-Za-z0-9_-]+$' OR octet_length(audience) > 255 THEN
      format('invalid audience "%s": an audience is 1 to 255 letters, digits, ''_'' or ''-''',
             left(audience, 80) || CASE WHEN length(audience) > 80 THEN '...' ELSE '' END)
    WHEN axis IS NULL OR axis NOT IN ('read', 'mint') THEN
      format('invalid axis "%s": the axis is ''read'' or ''mint''',
             left(axis, 80) || CASE WHEN length(axis) > 80 THEN '...' ELSE '' END)
    WHEN selector IS NULL OR octet_length(selector) > 255
         OR NOT (selector = '*' OR selector ~ '^(user|group):.+$') THEN
      format('invalid selector "%s": a selector is ''*'', ''user:<id>'' or ''group:<id>''',
             left(selector, 80) || CASE WHEN length(selector) > 80 THEN '...' ELSE '' END)
  END
$$;
COMMENT ON FUNCTION micromegas._mm_audience_problem(text,text,text) IS
  'Why an audience grant (audience, axis, selector) is invalid, or NULL; the table''s CHECK and mm_grant_audience use it';

CREATE TABLE micromegas.audience_grants (
  audience varchar(255) NOT NULL,
  axis varchar(4) NOT NULL CHECK (axis IN ('read', 'mint')),
  selector varchar(255) NOT NULL,
  created_at timestamptz NOT NULL,
  created_by varchar(255) NOT NULL,
  PRIMARY KEY (audience, axis, selector),
  CONSTRAINT audience_grants_valid CHECK (micromegas._mm_audience_problem(audience, axis, selector) IS NULL)
);
COMMENT ON COLUMN micromegas.audience_grants.audience IS 'The audience granted (the value rows carry in their audience column)';
COMMENT ON COLUMN micromegas.audience_grants.axis IS 'read (see rows of the audience) or mint (write rows into it)';
COMMENT ON COLUMN micromegas.audience_grants.selector IS 'Who: user:<email>, group:<name>, or * for everyone';
COMMENT ON COLUMN micromegas.audience_grants.created_at IS 'When the grant was made';
COMMENT ON COLUMN micromegas.audience_grants.created_by IS 'The actor who made it';
COMMENT ON TABLE micromegas.audience_grants IS
  'Audience grants: who may read or mint each audience';
-- </tables>

-- <deny list>
-- BEFORE INSERT OR UPDATE OR DELETE: a rule is compiled before it is stored;
-- the cap is counted under the access_state row lock, which every writer of
-- a rule takes, so it holds exactly. The creation columns are the
-- extension's (a superuser's pg_restore keeps the dumped ones).
CREATE FUNCTION micromegas._mm_deny_list_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  cap integer;
  held bigint;
BEGIN
  UPDATE micromegas.access_state SET deny_list_version = deny_list_version + 1;
  IF TG_OP = 'DELETE' THEN
    -- Its hit time goes too, unless a service is recording one right now
    -- (never waited for: the listings only show hits of existing rules).
    DELETE FROM micromegas.query_deny_hits h
     WHERE h.ctid = ANY (ARRAY(SELECT x.ctid FROM micromegas.query_deny_hits x
                                WHERE x.rule_id = OLD.rule_id FOR UPDATE SKIP LOCKED));
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' AND (NEW.rule_id, NEW.created_at, NEW.created_by)
                          IS DISTINCT FROM (OLD.rule_id, OLD.created_at, OLD.created_by) THEN
    RAISE EXCEPTION 'cannot change the id or creation of deny rule %', OLD.rule_id
      USING ERRCODE = 'feature_not_supported',
            HINT = 'Remove the rule and add a new one.';
  END IF;
  IF NEW.reason IS NULL OR btrim(NEW.reason, E' \t\n\r\f\v') = '' THEN
    RAISE EXCEPTION 'reason must not be empty'
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Say why the queries are denied: it is stored with the rule and shown to a denied caller.';
  END IF;
  IF TG_OP = 'INSERT' OR NEW.match_expr IS DISTINCT FROM OLD.match_expr THEN
    PERFORM micromegas._mm_check_deny_rule(NEW.match_expr);
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NOT micromegas._mm_keeps_creation(NEW.created_at, NEW.created_by) THEN
      NEW.created_at := clock_timestamp();
      NEW.created_by := micromegas._mm_actor();
    END IF;
    cap := micromegas._mm_deny_max_rules();
    SELECT count(*) INTO held FROM micromegas.query_deny_list;
    IF held >= cap THEN
      RAISE EXCEPTION 'the query deny list is full: it holds % rules, the limit is %', held, cap
        USING ERRCODE = 'program_limit_exceeded',
              HINT = 'Remove a rule with remove_query_denial(rule_id), or have a superuser raise micromegas_views.query_deny_max_rules.';
    END IF;
  END IF;
  RETURN NEW;
END
$$;
COMMENT ON FUNCTION micromegas._mm_deny_list_before_write() IS
  'Trigger: checks a deny rule and fills its creation columns';

CREATE FUNCTION micromegas._mm_deny_list_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_notify('micromegas_query_deny_list', json_build_object(
    'op', lower(TG_OP),
    'version', (SELECT a.deny_list_version FROM micromegas.access_state a))::text);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_deny_list_notify() IS
  'Trigger: bumps access_state.deny_list_version and notifies micromegas_query_deny_list';

CREATE TRIGGER query_deny_list_before_write
  BEFORE INSERT OR UPDATE OR DELETE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_before_write();
CREATE TRIGGER query_deny_list_notify
  AFTER INSERT OR DELETE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_notify();
CREATE TRIGGER query_deny_list_notify_update
  AFTER UPDATE ON micromegas.query_deny_list
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_deny_list_notify();
CREATE TRIGGER query_deny_list_no_truncate
  BEFORE TRUNCATE ON micromegas.query_deny_list
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- micromegas' deny_queries: validates and stores a rule; one (time, msg) row, msg the id.
CREATE FUNCTION micromegas.deny_queries(match_expr text, reason text)
RETURNS TABLE ("time" timestamptz, msg text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('deny_queries');
  id uuid;
BEGIN
  INSERT INTO micromegas.query_deny_list AS q (match_expr, reason)
  VALUES (match_expr, reason) RETURNING q.rule_id INTO id;
  RETURN QUERY SELECT clock_timestamp(), id::text;
END
$$;
COMMENT ON FUNCTION micromegas.deny_queries(text,text) IS
  'Admin: adds a deny rule (a boolean expression over the query''s attributes) with its reason; returns a log of what it did';

-- micromegas' list_query_denials: every rule in force, oldest first.
CREATE FUNCTION micromegas.list_query_denials()
RETURNS TABLE (rule_id text, created_at timestamptz, created_by text, reason text, match_expr text,
               last_hit_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT q.rule_id::text, q.created_at, q.created_by::text, q.reason, q.match_expr, h.last_hit_at
    FROM micromegas.query_deny_list q LEFT JOIN micromegas.query_deny_hits h ON h.rule_id = q.rule_id
   ORDER BY q.created_at, q.rule_id
$$;
COMMENT ON FUNCTION micromegas.list_query_denials() IS
  'Admin: every deny rule with its reason, creator and last hit';

-- micromegas' remove_query_denial: deletes one rule; the outcome as text, never an error.
CREATE FUNCTION micromegas.remove_query_denial(rule_id text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('remove_query_denial');
  id uuid;
BEGIN
  IF rule_id IS NULL THEN
    RETURN 'ERROR: no rule id given (NULL)';
  END IF;
  BEGIN
    id := rule_id::uuid;
  EXCEPTION WHEN invalid_text_representation THEN
    RETURN format('ERROR: ''%s'' is not a valid rule id', rule_id);
  END;
  DELETE FROM micromegas.query_deny_list q WHERE q.rule_id = id;
  IF FOUND THEN
    RETURN format('SUCCESS: removed rule %s', id);
  END IF;
  RETURN format('ERROR: no such rule: %s', id);
END
$$;
COMMENT ON FUNCTION micromegas.remove_query_denial(text) IS
  'Admin: removes a deny rule';

-- A service flushes the rules' hits: last_hit_at only moves forward, never
-- past the server's clock (a NULL time is now), and only for rules that
-- exist. Takes no lock on a rule. Returns how many rules it touched.
CREATE FUNCTION micromegas.mm_record_query_denial_hits(rule_ids uuid[], at timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_record_query_denial_hits');
  touched integer;
  hit timestamptz := least(coalesce(at, now()), now());
BEGIN
  INSERT INTO micromegas.query_deny_hits AS h (rule_id, last_hit_at)
  SELECT DISTINCT q.rule_id, hit FROM micromegas.query_deny_list q WHERE q.rule_id = ANY (rule_ids)
  ON CONFLICT (rule_id) DO UPDATE SET last_hit_at = greatest(h.last_hit_at, EXCLUDED.last_hit_at);
  GET DIAGNOSTICS touched = ROW_COUNT;
  RETURN touched;
END
$$;
COMMENT ON FUNCTION micromegas.mm_record_query_denial_hits(uuid[],timestamp with time zone) IS
  'Service: records when rules last denied a query (in query_deny_hits, never locking a rule)';

-- The first rule, oldest first, whose expression is TRUE for a query's
-- context (NULL is no match), evaluated with the same compiled expression a
-- rule is checked with. sql_hash, when not given, is the fingerprint of sql
-- (computed in the same call).
CREATE FUNCTION micromegas.mm_match_query_denial(
  user_id text DEFAULT NULL, email text DEFAULT NULL, service_account text DEFAULT NULL,
  client text DEFAULT NULL, agent text DEFAULT NULL, entrypoint text DEFAULT NULL,
  session text DEFAULT NULL, notebook text DEFAULT NULL, cell text DEFAULT NULL,
  client_ip text DEFAULT NULL, sql text DEFAULT NULL, sql_hash text DEFAULT NULL)
RETURNS TABLE (rule_id text, reason text, match_expr text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH rules AS (
    SELECT array_agg(q.rule_id::text ORDER BY q.created_at, q.rule_id) AS ids,
           array_agg(q.match_expr ORDER BY q.created_at, q.rule_id) AS exprs
      FROM micromegas.query_deny_list q),
  hit AS (
    SELECT r.ids[micromegas._mm_first_denial(r.ids, r.exprs, ARRAY[
             mm_match_query_denial.user_id, mm_match_query_denial.email,
             mm_match_query_denial.service_account, mm_match_query_denial.client,
             mm_match_query_denial.agent, mm_match_query_denial.entrypoint,
             mm_match_query_denial.session, mm_match_query_denial.notebook,
             mm_match_query_denial.cell, mm_match_query_denial.client_ip,
             mm_match_query_denial.sql, mm_match_query_denial.sql_hash])] AS id
      FROM rules r WHERE r.ids IS NOT NULL)
  SELECT q.rule_id::text, q.reason, q.match_expr
    FROM hit JOIN micromegas.query_deny_list q ON q.rule_id::text = hit.id
$$;
COMMENT ON FUNCTION micromegas.mm_match_query_denial(text,text,text,text,text,text,text,text,text,text,text,text) IS
  'Service or admin: the first deny rule a query with these attributes matches, if any';

-- The same, with the context as a jsonb object of those keys. (Its own
-- name: an uncast string literal would otherwise go to the text form above
-- as user_id.)
CREATE FUNCTION micromegas.mm_match_query_denial_context(context jsonb)
RETURNS TABLE (rule_id text, reason text, match_expr text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  unknown text;
BEGIN
  IF jsonb_typeof(context) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'the match context must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT string_agg(k, ', ' ORDER BY k) INTO unknown FROM jsonb_object_keys(context) k
   WHERE k NOT IN ('user_id', 'email', 'service_account', 'client', 'agent', 'entrypoint', 'session',
                   'notebook', 'cell', 'client_ip', 'sql', 'sql_hash');
  IF unknown IS NOT NULL THEN
    RAISE EXCEPTION 'unknown match context key(s): %', unknown
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'The keys are user_id, email, service_account, client, agent, entrypoint, session, notebook, cell, client_ip, sql and sql_hash.';
  END IF;
  RETURN QUERY SELECT * FROM micromegas.mm_match_query_denial(
    user_id => context->>'user_id', email => context->>'email',
    service_account => context->>'service_account', client => context->>'client',
    agent => context->>'agent', entrypoint => context->>'entrypoint', session => context->>'session',
    notebook => context->>'notebook', cell => context->>'cell', client_ip => context->>'client_ip',
    sql => context->>'sql', sql_hash => context->>'sql_hash');
END
$$;
COMMENT ON FUNCTION micromegas.mm_match_query_denial_context(jsonb) IS
  'mm_match_query_denial with the attributes as one JSON object';
-- </deny list>

-- <audience grants>
-- BEFORE INSERT OR UPDATE OR DELETE: the rules with their messages, the
-- audit columns, the version.
CREATE FUNCTION micromegas._mm_audience_grants_before_write() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  problem text;
BEGIN
  UPDATE micromegas.access_state SET audience_grants_version = audience_grants_version + 1;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  problem := micromegas._mm_audience_problem(NEW.audience, NEW.axis, NEW.selector);
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION '%', problem USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF TG_OP = 'INSERT' AND NOT micromegas._mm_keeps_creation(NEW.created_at, NEW.created_by) THEN
    NEW.created_at := clock_timestamp();
    NEW.created_by := micromegas._mm_actor();
  ELSIF TG_OP = 'UPDATE' THEN
    NEW.created_at := OLD.created_at;
    NEW.created_by := OLD.created_by;
  END IF;
  RETURN NEW;
END
$$;
COMMENT ON FUNCTION micromegas._mm_audience_grants_before_write() IS
  'Trigger: checks an audience grant (_mm_audience_problem) and fills its creation columns';

CREATE FUNCTION micromegas._mm_audience_grants_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  -- Only what changed and the version, as for the deny list: any role may
  -- LISTEN, and a grant names people and audiences that readers may not see.
  PERFORM pg_notify('micromegas_audience_grants', json_build_object(
    'op', lower(TG_OP), 'version', (SELECT a.audience_grants_version FROM micromegas.access_state a))::text);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION micromegas._mm_audience_grants_notify() IS
  'Trigger: bumps access_state.audience_grants_version and notifies micromegas_audience_grants';

CREATE TRIGGER audience_grants_before_write
  BEFORE INSERT OR UPDATE OR DELETE ON micromegas.audience_grants
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_audience_grants_before_write();
CREATE TRIGGER audience_grants_notify
  AFTER INSERT OR UPDATE OR DELETE ON micromegas.audience_grants
  FOR EACH ROW EXECUTE FUNCTION micromegas._mm_audience_grants_notify();
CREATE TRIGGER audience_grants_no_truncate
  BEFORE TRUNCATE ON micromegas.audience_grants
  FOR EACH STATEMENT EXECUTE FUNCTION micromegas._mm_refuse_truncate();

-- The two shipped grants (everyone may read the public audience, and mint
-- into it) are written with the other shipped rows (sql/api.sql).

-- Grants or revokes one (audience, axis, selector); the outcome is
-- granted/already_granted or revoked/not_found.
CREATE FUNCTION micromegas.mm_grant_audience(audience text, axis text, selector text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_grant_audience');
  problem text := micromegas._mm_audience_problem(audience, axis, selector);
BEGIN
  -- The trigger applies the same rule, but a value longer than its column
  -- fails the cast to varchar before any trigger runs: checked here first,
  -- so the caller gets the rule's message.
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION '%', problem USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO micromegas.audience_grants AS g (audience, axis, selector)
  VALUES (audience, axis, selector)
  ON CONFLICT ON CONSTRAINT audience_grants_pkey DO NOTHING;
  RETURN CASE WHEN FOUND THEN 'granted' ELSE 'already_granted' END;
END
$$;
COMMENT ON FUNCTION micromegas.mm_grant_audience(text,text,text) IS
  'Admin: grants an audience on an axis (read or mint) to a selector (user:, group: or *)';

CREATE FUNCTION micromegas.mm_revoke_audience(audience text, axis text, selector text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  on_primary boolean := micromegas._mm_require_writable('mm_revoke_audience');
  problem text := micromegas._mm_audience_problem(audience, axis, selector);
BEGIN
  -- No row may be written, so no trigger may check: an invalid triple is
  -- an error here, not a quiet not_found.
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION '%', problem USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM micromegas.audience_grants g
   WHERE g.audience = audience AND g.axis = axis AND g.selector = selector;
  RETURN CASE WHEN FOUND THEN 'revoked' ELSE 'not_found' END;
END
$$;
COMMENT ON FUNCTION micromegas.mm_revoke_audience(text,text,text) IS
  'Admin: revokes an audience grant';

-- The end user a service claims to act for, from the settings it sets per
-- request: caller_email, caller_groups (comma-separated) and
-- caller_is_admin. Selectors user:<email> and group:<g>, never '*'. claimed
-- is false when none of the three is set.
CREATE FUNCTION micromegas._mm_caller_claims(OUT is_admin boolean, OUT selectors text[], OUT claimed boolean)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce(lower(btrim(current_setting('micromegas_views.caller_is_admin', true))) IN ('on', 'true', 'yes', '1'), false),
         array_remove(
           ARRAY['user:' || nullif(btrim(current_setting('micromegas_views.caller_email', true)), '')]
           || ARRAY(SELECT 'group:' || btrim(g)
                      FROM unnest(string_to_array(current_setting('micromegas_views.caller_groups', true), ',')) g
                     WHERE btrim(g) <> ''),
           NULL),
         coalesce(nullif(btrim(current_setting('micromegas_views.caller_email', true)), ''),
                  nullif(btrim(current_setting('micromegas_views.caller_groups', true)), ''),
                  nullif(btrim(current_setting('micromegas_views.caller_is_admin', true)), '')) IS NOT NULL
$$;
COMMENT ON FUNCTION micromegas._mm_caller_claims() IS
  'The caller_email, caller_groups and caller_is_admin claims a service or admin role passes for its end user';

-- The grants an end user may see. Which grants exist is decided
-- by database privileges (the table and the snapshot: services and admins
-- only). This listing is a presentation rule for the end user a service
-- acts for: a claimed admin (caller_is_admin) sees every row; a claimed
-- user sees every row of each (audience, axis) pair one of its selectors
-- holds; claims are honoured only from a member of micromegas_service or
-- micromegas_admin (the role running the statement, not the login role and
-- not a setting). Without claims, an admin sees every row (psql) and a
-- service none. Anyone else: nothing.
CREATE FUNCTION micromegas.list_audience_grants()
RETURNS TABLE (audience text, axis text, selector text, created_at timestamptz, created_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  caller text := micromegas._mm_caller();
  is_admin boolean := pg_catalog.pg_has_role(caller, 'micromegas_admin', 'MEMBER');
  c record;
BEGIN
  IF NOT (is_admin OR pg_catalog.pg_has_role(caller, 'micromegas_service', 'MEMBER')) THEN
    RETURN;
  END IF;
  SELECT * INTO c FROM micromegas._mm_caller_claims();
  RETURN QUERY
    SELECT g.audience::text, g.axis::text, g.selector::text, g.created_at, g.created_by::text
      FROM micromegas.audience_grants g
     WHERE CASE WHEN c.claimed THEN
                  c.is_admin OR (g.audience, g.axis) IN (SELECT h.audience, h.axis FROM micromegas.audience_grants h
                                                          WHERE h.selector = ANY (c.selectors))
                ELSE is_admin END
     ORDER BY g.audience, g.axis, g.selector;
END
$$;
COMMENT ON FUNCTION micromegas.list_audience_grants() IS
  'The audience grants the caller may see (a service or admin passes its end user''s claims)';
-- </audience grants>

-- <snapshots>
-- The services' reads (the FlightSQL replicas enforce both lists): the
-- version and every row, in one statement, so one consistent read; and the
-- two versions, polled to notice a missed notification.
CREATE FUNCTION micromegas.mm_query_deny_list_snapshot()
RETURNS TABLE (version bigint, rule_id uuid, created_at timestamptz, created_by text, reason text,
               match_expr text, last_hit_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.deny_list_version, q.rule_id, q.created_at, q.created_by::text, q.reason, q.match_expr, h.last_hit_at
    FROM micromegas.access_state a LEFT JOIN micromegas.query_deny_list q ON true
    LEFT JOIN micromegas.query_deny_hits h ON h.rule_id = q.rule_id
   ORDER BY q.created_at, q.rule_id
$$;
COMMENT ON FUNCTION micromegas.mm_query_deny_list_snapshot() IS
  'Service: every deny rule with the deny list''s version, in one read';

CREATE FUNCTION micromegas.mm_audience_grants_snapshot()
RETURNS TABLE (version bigint, audience text, axis text, selector text, created_at timestamptz, created_by text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.audience_grants_version, g.audience::text, g.axis::text, g.selector::text, g.created_at, g.created_by::text
    FROM micromegas.access_state a LEFT JOIN micromegas.audience_grants g ON true
   ORDER BY g.audience, g.axis, g.selector
$$;
COMMENT ON FUNCTION micromegas.mm_audience_grants_snapshot() IS
  'Service: every audience grant with the grants'' version, in one read';

CREATE FUNCTION micromegas.mm_access_versions()
RETURNS TABLE (deny_list_version bigint, audience_grants_version bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.deny_list_version, a.audience_grants_version FROM micromegas.access_state a
$$;
COMMENT ON FUNCTION micromegas.mm_access_versions() IS
  'The deny list''s and the audience grants'' versions (services reload when one moves)';
-- </snapshots>
