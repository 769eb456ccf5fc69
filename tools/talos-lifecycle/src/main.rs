pop_common::main!(talos_lifecycle);
