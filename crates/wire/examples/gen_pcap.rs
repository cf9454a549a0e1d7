//! Synthesise a large pcap for the `analyze` benchmark (see `latscope_wire::synth`).
//!
//! Usage: gen_pcap OUT.pcap [PACKETS] [CONCURRENT] [SEED] [persistent|one-way]
//! (`persistent`: connections never close; `one-way`: persistent, server → client only).

use std::fs::File;
use std::io::BufWriter;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1) else {
        eprintln!("usage: gen_pcap OUT.pcap [PACKETS] [CONCURRENT] [SEED] [persistent|one-way]");
        std::process::exit(2);
    };
    let packets: u64 = args
        .get(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let concurrent: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seed: u64 = args
        .get(4)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let shape = match args.get(5).map(String::as_str) {
        None | Some("") => latscope_wire::synth::Shape::default(),
        Some("persistent") => latscope_wire::synth::Shape {
            persistent: true,
            one_way: false,
        },
        Some("one-way") => latscope_wire::synth::Shape {
            persistent: true,
            one_way: true,
        },
        Some(other) => {
            eprintln!("unknown shape {other:?}: persistent or one-way");
            std::process::exit(2);
        }
    };
    let p = latscope_wire::synth::generate_shape(
        BufWriter::with_capacity(1 << 20, File::create(out)?),
        packets,
        concurrent,
        seed,
        shape,
    )?;
    eprintln!(
        "wrote {} packets, {} connections ({concurrent} concurrent) to {out}",
        p.packets, p.connections
    );
    eprintln!(
        "planted: {} nagle_delayed_ack, {} rto_retransmission, {} think_time",
        p.nagle_delayed_ack, p.rto_retransmission, p.think_time
    );
    Ok(())
}
