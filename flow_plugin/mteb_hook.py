def install():
    pass
