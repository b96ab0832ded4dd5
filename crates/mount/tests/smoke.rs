mod common;
use common::*;

#[test]
fn smoke() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let (_rt, store) = mem_store();
    let d = dirs(&["mnt"]);
    let h = mount_with(&store, &d.mnt, options(&d.spool));
    std::fs::create_dir(d.mnt.join("photos")).unwrap();
    std::fs::create_dir_all(d.mnt.join("photos/2024")).unwrap();
    std::fs::write(d.mnt.join("photos/2024/cat.jpg"), b"meow").unwrap();
    assert_eq!(
        std::fs::read(d.mnt.join("photos/2024/cat.jpg")).unwrap(),
        b"meow"
    );
    println!("{}", sh(&format!("ls -laiR {}", d.mnt.display())));
    h.unmount().unwrap();
}
