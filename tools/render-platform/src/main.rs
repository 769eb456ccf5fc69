pop_common::main!(render_platform);
