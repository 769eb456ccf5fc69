pop_common::main!(render_edge);
