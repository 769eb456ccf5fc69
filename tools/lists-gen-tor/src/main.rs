pop_common::main!(lists_gen_tor);
