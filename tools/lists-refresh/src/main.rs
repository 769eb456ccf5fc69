pop_common::main!(lists_refresh);
