#[pgrx::pg_test]
fn placeholder() {}
