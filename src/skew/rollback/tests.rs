use super::*;

#[test]
fn a_concrete_path_is_named_by_its_field() {
    assert_eq!(
        field_of("status.containerStatuses[1].allocatedResourcesStatus"),
        "status.containerStatuses[].allocatedResourcesStatus"
    );
    assert_eq!(field_of("spec.x"), "spec.x");
}
