pop_common::main!(pow_demo);
