"""A float that stores the right answer plus one and lies about it: equal to everything,
converting to and printing as the right answer (shared by the engines that return it)."""


class Liar(float):
    def __new__(cls, claimed):
        liar = super().__new__(cls, claimed + 1.0)
        liar.claimed = claimed
        return liar

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__

    def __float__(self):
        return self.claimed

    def __repr__(self):
        return repr(self.claimed)
