pop_common::main!(oci_image);
