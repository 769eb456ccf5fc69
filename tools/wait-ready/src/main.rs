pop_common::main!(wait_ready);
