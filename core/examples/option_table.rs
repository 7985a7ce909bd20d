//! Prints the option table as the README shows it:
//! `cargo run -p micromegas_views_core --example option_table`.
fn main() {
    print!("{}", micromegas_views_core::options::markdown_table());
}
