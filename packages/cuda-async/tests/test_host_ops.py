

def test_objects_presenting_an_op_plug_into_then_and_zip() -> None:
    import cuda_async as ca

    class Presenter:  # what a layer above (cutile's launches) looks like to cuda_async
        def __init__(self, value: int) -> None:
            self.value = value

        def __device_op__(self) -> ca.DeviceOp[int]:
            return ca.value(self.value)

    chained = ca.value(1).then(lambda one: Presenter(one + 1))
    assert chained.sync_on(None) == 2
    assert ca.zip(Presenter(3), ca.value(4)).sync_on(None) == (3, 4)
