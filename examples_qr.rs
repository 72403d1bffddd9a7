fn main() {
    let text = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    println!("{}", mihari::config::quick_reader_reads(&text));
}
